package localcache

import "github.com/sluicehq/sluice/internal/verdict"

// Need-driven sync. The bound L(1+ε) rests on the divergence cap, not on the
// periodic sync: a key far below its limit gains no accuracy from being
// pushed and pulled every interval. What the sync does for such a key is
// give its instance its cap back (acknowledged counts no longer count
// against it) and show the others its counts, which matters only near the
// limit. So the syncer's cycle asks Need of each key it drained, and syncs
// only the keys that need it. The others it parks (Park), and a new key of
// a table synced by need starts parked (added): a parked key is off the
// dirty list with its counts pending, and its admissions no longer queue
// it, until one takes the key to half of its local allowance (after), the
// table leaves its healthy state, a sweep finds the key idle or the syncer
// queues it (MarkDirty); a Flush finds them all (Unsynced). A quiet key
// thus costs the syncer at most one look per park, not one per cycle in
// which it is admitted to: at a million keys, most of them quiet, that look
// (a cache miss or two per key) was most of the syncer's CPU.

// Need reports whether r needs a sync at now. A key needs one when:
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
func (sk *syncKeys) Need(r verdict.Ref, now int64) bool {
	t := (*Table)(sk)
	e := entryOf(r)
	if e == nil || !t.eventual || health(t.health.Load()) != healthy {
		return true
	}
	u, est := t.unacked(e, now)
	return u >= max(t.capv.Load(), 1) || 2*est >= float64(t.limit.Load())
}

// unacked returns e's unacknowledged count in the window at now, the units
// its lease covers aside, and the window's estimate as this instance sees
// it, its own counts included.
func (t *Table) unacked(e *hdr, now int64) (int64, float64) {
	v, own := t.seen(e, now)
	return v.div + own, v.others.Value() + float64(own)
}

// seen returns the window as this instance sees e at now (scan) and its own
// count of the current bucket, which the view does not hold: the pending
// units past those its lease covers (the store has those).
func (t *Table) seen(e *hdr, now int64) (view, int64) {
	k := t.geo.Index(now)
	s := t.slotOf(k)
	v := t.scan(e, k, s, t.geo.Phase(now))
	cur := countAt(t.pend(e, s).Load(), k)
	return v, cur - t.covered(e, k, cur)
}

// Unsynced appends the keys with unacknowledged counts in the window at now,
// whether queued or not, for a Flush: the cycles leave the keys that need
// no sync with their counts pending (Need). It walks every key.
func (sk *syncKeys) Unsynced(dst []verdict.Ref, now int64) []verdict.Ref {
	t := (*Table)(sk)
	if !t.eventual {
		return dst
	}
	t.m.Range(func(e *hdr) bool {
		if u, _ := t.unacked(e, now); u > 0 {
			dst = append(dst, e)
		}
		return true
	})
	return dst
}

// parkedLink is the dirty-list link of a parked entry: its state is dirty,
// so admissions do not queue it, but it is on no list. It is never an entry
// of a table.
var parkedLink = new(hdr)

// Park parks r, which a cycle drained and found in no need of a sync (Need),
// unless an admission has queued it again since the drain.
func (sk *syncKeys) Park(r verdict.Ref) {
	t := (*Table)(sk)
	e := entryOf(r)
	if e == nil || !t.eventual || !e.state.CompareAndSwap(stClean, stDirty) {
		return
	}
	t.tail(e).next.Store(parkedLink)
	if health(t.health.Load()) != healthy {
		t.unpark(e) // SetLimits may have unparked every key before the store above
	}
}

// added counts e, just inserted, and in a healthy table synced by need
// (Config.ByNeed) parks it: a new key is quiet until its admissions show
// otherwise, so its first admission does not queue it for a cycle that
// would only park it (with keys that keep coming, that look at every new
// key was most of the syncer's CPU and slowed the checks beside it). The
// rules that unpark a parked key apply from its first admission. Off its
// healthy state a table queues every key it admits to, so a new key is left
// clean (one its checks only deny is not queued); Park queues it at once if
// the table leaves that state meanwhile, and a check that admits on it
// before Park queues it, as for any clean key.
func (t *Table) added(e *hdr) {
	t.keys.n.Add(1)
	if t.byNeed && health(t.health.Load()) == healthy {
		t.syncView().Park(e)
	}
}

// unpark queues e on the dirty list if it is parked.
func (t *Table) unpark(e *hdr) {
	if t.tail(e).next.CompareAndSwap(parkedLink, nil) {
		t.push(e)
	}
}

// unparkNear unparks e after an admission that brought the current bucket's
// pend to c, of a budget of budget (see afterAdmit), if that took it to
// half of its local allowance: before Need can say yes. Need's other reason,
// half of the limit in view, needs no admission of its own here: a key
// near its limit has a budget of at most its cap (ε·L/(N̂+1)) or the room
// left, so its admissions reach half of it soon after, and until then the
// cap bounds what it admits unseen, as for any key.
func (t *Table) unparkNear(e *hdr, c, budget int64) {
	if t.eventual && 2*c >= budget && t.tail(e).next.Load() == parkedLink {
		t.unpark(e)
	}
}

// unparkAll unparks every parked key: the table left its healthy state, in
// which every key needs a sync.
func (t *Table) unparkAll() {
	t.m.Range(func(e *hdr) bool {
		t.unpark(e)
		return true
	})
}
