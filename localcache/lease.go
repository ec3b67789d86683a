package localcache

// Leases. The store can grant an Eventual key a lease with a sync: units of
// the window's room that it counted at once, as admitted, in the bucket of
// the grant. Until that bucket ends this instance may admit
// them on its own, on top of its divergence cap: the bucket's budget grows by
// the lease. Admissions in the lease's bucket stay in pend like any other;
// the first lease units of them are "covered" — the store has them already —
// so Pending does not push them, the estimate does not count them twice, and
// they do not count against the cap. Release ends the lease: the covered
// units leave pend, and the units not used go back to the syncer, which
// pushes them as a negative correction.

// leaseWord returns e's lease word: 0 for an entry that holds none, or
// of a Local table.
func (t *Table) leaseWord(e *hdr) uint64 {
	if !t.eventual {
		return 0
	}
	return t.tail(e).lease.Load()
}

// covered returns how many of count p, e's pend in bucket j, the lease word
// lw covers.
func covered(lw uint64, j, p int64) int64 {
	return min(p, countAt(lw, j))
}

// Release ends r's lease of bucket j, if bucket j is over at now and at the
// time last published by Tick (until then fast-path checks may still admit
// on the bucket's budget, lease included), or with force: the units it
// covered leave pend and the units not used are returned. done is false
// while the bucket is not over (the lease stays: ask again later); true once
// the lease is ended, or if r holds none. The budget is recomputed without
// the lease before pend is read, so that a check racing with the release
// counts as uncovered, and is pushed (with force, such a check may take
// this instance past its cap by its cost: Flush and Close force).
func (t *Table) Release(r Ref, j, now int64, force bool) (unused int64, done bool) {
	e := entryOf(r)
	if e == nil || !t.eventual {
		return 0, true
	}
	if !force && (j >= t.geo.Index(now) || j >= t.geo.Index(t.now.Load())) {
		return 0, false
	}
	lw := t.tail(e).lease.Swap(0)
	units := countAt(lw, j)
	if units == 0 {
		return 0, true
	}
	t.plan(e, now, nil)
	si := t.slotOf(j)
	for {
		w := t.pend(e, si).Load()
		c := min(countAt(w, j), units)
		if c == 0 || t.pend(e, si).CompareAndSwap(w, w-uint64(c)) {
			return units - c, true
		}
	}
}

// Want returns the lease r should ask for at now: twice what it has admitted
// in the current bucket (its lease so far and the pending count past it), at
// least twice its divergence cap, and at least this instance's part of what
// the fleet admitted in the bucket before (part). A key that keeps its rate
// asks for about a bucket's worth at the bucket's first sync, instead of
// doubling its lease sync after sync; one that keeps reaching its cap
// doubles it until it covers the bucket. The units left unused, which count
// in the window until the bucket ends, stay below what the key used, or
// below what it used in the bucket before.
func (t *Table) Want(r Ref, now int64) int64 {
	e := entryOf(r)
	if e == nil || !t.eventual {
		return 0
	}
	k := t.geo.Index(now)
	lw := t.tail(e).lease.Load()
	p := countAt(t.pend(e, t.slotOf(k)).Load(), k)
	used := countAt(lw, k) + p - covered(lw, k, p)
	return clampCount(max(2*max(used, t.capv.Load(), 1), int64(t.part(e, k))))
}

// setLease records a grant of l.Count units in bucket l.Index: added to a
// lease of the same bucket, or in place of none (the syncer releases a lease
// of another bucket first).
func (t *Table) setLease(e *hdr, l Bucket) {
	if l.Count <= 0 || !t.eventual {
		return
	}
	lw := t.tail(e).lease.Load()
	t.tail(e).lease.Store(pack(l.Index, countAt(lw, l.Index)+l.Count))
}
