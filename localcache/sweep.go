package localcache

// idle reports whether e holds nothing inside the window at bucket k, and
// no lease: the store counts leased units until the syncer ends the lease
// and gives back the unused ones (Release), which needs the entry. (A fixed
// window's key leased the next window ahead of its end holds no count of
// that window until its first pull there.)
func (t *Table) idle(e *hdr, k int64) bool {
	if t.eventual && (t.tail(e).lease[0].Load() != 0 || t.tail(e).lease[1].Load() != 0) {
		return false
	}
	span := int64(t.span)
	for i := 0; i < t.ring; i++ {
		if w := t.pend(e, i).Load(); countOf(w) != 0 && distance(tagOf(w), k) < span {
			return false
		}
		if w := t.glob(e, i).Load(); countOf(w) != 0 && distance(tagOf(w), k) < span {
			return false
		}
	}
	return true
}

// Sweep evicts keys with nothing left in the window at now and returns how
// many it removed.
func (t *Table) Sweep(now int64) (removed int) {
	k := t.geo.Index(now)
	t.m.Range(func(e *hdr) bool {
		switch e.state.Load() {
		case stDirty:
			// A parked key (need.go) that has gone idle becomes clean, to
			// be swept like the others.
			if t.eventual && t.tail(e).next.Load() == parkedLink && t.idle(e, k) &&
				t.tail(e).next.CompareAndSwap(parkedLink, nil) {
				e.state.CompareAndSwap(stDirty, stClean)
			}
		case stClean:
			if t.idle(e, k) {
				e.state.CompareAndSwap(stClean, stDead)
			}
		case stDead:
			if t.idle(e, k) && e.state.CompareAndSwap(stDead, stGone) {
				t.keys.n.Add(-1)
				t.m.Delete(keyOf(e), e)
				removed++
			}
		}
		return true
	})
	return removed
}
