package localcache

// Need-driven sync. The bound L(1+ε) rests on the divergence cap, not on the
// periodic sync: a key far below its limit gains no accuracy from being
// pushed and pulled every interval. What the sync does for such a key is
// give its instance its cap back (acknowledged counts no longer count
// against it) and show the others its counts, which matters only near the
// limit. So the syncer's cycle asks Need of each key it drained, and syncs
// only the keys that need it; the others stay queued for the next cycle
// while they have counts in the window, and a Flush syncs every key.

// Need reports whether r needs a sync at now, and, if it does not, whether
// it should stay queued (it has unacknowledged counts in the window). A key
// needs one when:
//
//   - its unacknowledged count in the window (the leased units aside) has
//     reached its cap (at least 1): its next checks would otherwise wait for
//     the store (a lease needs no cycle: its key asks for an early sync
//     when half of it is used, and the syncer ends it when its bucket does);
//   - it is near its limit: the window as this instance sees it, its own
//     counts included, holds at least half of the limit, so that the others
//     hear of its counts and it of theirs while that can still decide a
//     check;
//   - the table is not healthy (the failure mode and the recovery decide
//     what a sync does: the cycle keeps its old rule, every key).
//
// A key with nothing to push that is not near its limit needs nothing.
func (t *Table) Need(r Ref, now int64) (sync, keep bool) {
	e := entryOf(r)
	if e == nil || !t.eventual || health(t.health.Load()) != healthy {
		return true, false
	}
	k := t.geo.Index(now)
	s := t.slotOf(k)
	v := t.scan(e, k, s, t.geo.Phase(now))
	lw := t.tail(e).lease.Load()
	cur := countAt(t.pend(e, s).Load(), k)
	u := v.div + cur - covered(lw, k, cur)
	limit := t.limit.Load()
	switch {
	case u >= max(t.capv.Load(), 1):
		return true, false
	case 2*(v.others.Value()+float64(cur-covered(lw, k, cur))) >= float64(limit):
		return true, false
	}
	return false, u > 0
}
