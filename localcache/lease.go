package localcache

import (
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// Leases. The store can grant an Eventual key a lease with a sync: units of
// the window's room that it counted at once, as admitted, in the bucket the
// lease is for — the bucket of the grant, or the next one when the syncer
// asks ahead of a bucket's end (NextWant), so that a busy key starts each
// bucket with a lease instead of its cap alone. While that bucket is current
// this instance may admit them on its own, on top of its divergence cap: the
// bucket's budget grows by the lease. A key holds at most one lease per
// bucket parity, the current bucket's and the next one's. Admissions in a
// lease's bucket stay in pend like any other; the first lease units of them
// are "covered" — the store has them already — so Pending does not push
// them, the estimate does not count them twice, and they do not count
// against the cap. Release ends a lease: the covered units leave pend, and
// the units not used go back to the syncer, which pushes them as a negative
// correction.

// leaseAt returns the units e holds on lease in bucket j: 0 for none, or in
// a Local table.
func (t *Table) leaseAt(e *hdr, j int64) int64 {
	if !t.eventual {
		return 0
	}
	return countAt(t.tail(e).lease[j&1].Load(), j)
}

// covered returns how many of count p, e's pend in bucket j, its lease of
// bucket j covers.
func (t *Table) covered(e *hdr, j, p int64) int64 {
	return min(p, t.leaseAt(e, j))
}

// Release ends r's lease of bucket j, if bucket j is over at now and at the
// time last published by Tick (until then fast-path checks may still admit
// on the bucket's budget, lease included), or with force: the units it
// covered leave pend and the units not used are returned. done is false
// while the bucket is not over (the lease stays: ask again later); true once
// the lease is ended, or if r holds none of bucket j. The budget is
// recomputed without the lease before the pend word is lowered and its
// version bumped (word.go), so that a check racing with the release is
// either counted in pend before it (and covered) or held to the new budget:
// a fast-path check reads the budget after the pend word it adds to (add),
// and fails its compare-and-swap if the word changed since, even when the
// lease covered nothing; a slow-path one plans again once Release has
// bumped the entry's synced count. So a lease may end at any time, used or
// not.
func (sk *syncKeys) Release(r verdict.Ref, j, now int64, force bool) (unused int64, done bool) {
	t := (*Table)(sk)
	e := entryOf(r)
	if e == nil || !t.eventual {
		return 0, true
	}
	if !force && (j >= t.geo.Index(now) || j >= t.geo.Index(t.now.Load())) {
		return 0, false
	}
	slot := &t.tail(e).lease[j&1]
	lw := slot.Load()
	units := countAt(lw, j)
	if units == 0 || !slot.CompareAndSwap(lw, 0) {
		// None of bucket j (the slot may hold another bucket's lease, which
		// only the syncer's loop, the caller, changes).
		return 0, true
	}
	e.synced.Add(1) // a slow-path check planned with the lease plans again
	t.plan(e, now, nil)
	si := t.slotOf(j)
	for {
		w := t.pend(e, si).Load()
		if tagOf(w) != j&tagMask {
			// No budget of bucket j is live: none can be admitted on.
			return units, true
		}
		c := min(countOf(w), units)
		if t.pend(e, si).CompareAndSwap(w, bumped(w)-uint64(c)) {
			return units - c, true
		}
	}
}

// Want returns the lease r should ask for at now: twice what it has admitted
// in the current bucket (used), at least twice its divergence cap, and at
// least this instance's part of what the fleet admitted in the bucket before
// (part). A key that keeps its rate asks for about a bucket's worth at the
// bucket's first sync, instead of doubling its lease sync after sync; one
// that keeps reaching half of its allowance doubles it until it covers the
// bucket. The units left unused, which count in the window until the bucket
// ends, stay below what the key used, or below what it used in the bucket
// before; and at least peak, the most leased units it used in one bucket of
// the window (the syncer's count).
//
// It never takes what the key holds unused past holdMost (the lease of the
// current bucket not used yet and the next bucket's, all of it), the peak
// included: 0 if it holds that much.
func (sk *syncKeys) Want(r verdict.Ref, now, peak int64) int64 {
	t := (*Table)(sk)
	e := entryOf(r)
	if e == nil || !t.eventual {
		return 0
	}
	k := t.geo.Index(now)
	want := clampCount(max(2*max(t.used(e, k), t.capv.Load(), 1), int64(t.part(e, k)), peak))
	return min(want, t.unheld(e, k))
}

// unheld returns how many more leased units e may hold unused at bucket k:
// holdMost less what it holds (held), 0 if none.
func (t *Table) unheld(e *hdr, k int64) int64 {
	return max(t.hold.Load()-t.held(e, k), 0)
}

// held returns the leased units e holds unused at bucket k: what its lease
// of k has not used, its lease of k+1, and what a lease of k−1 not ended
// yet has not used (its slot is k+1's: one of the two at most).
func (t *Table) held(e *hdr, k int64) int64 {
	return t.leaseLeft(e, k) + t.leaseAt(e, k+1) + t.leaseLeft(e, k-1)
}

// holdMost returns the most leased units an instance holds unused at once,
// per key: ⌊(⌊L/10⌋ − 1)/(N̂+1)⌋, with N̂ read from the share ⌊L/N̂⌋, and
// at least one. The fleet's then hold at most N̂/(N̂+1) of the last tenth of
// the limit less a unit, and with them a view counts its own lease of the
// next bucket twice until its next pull: within the last tenth. So however
// a key's traffic moves between instances, the units leased where it no
// longer goes cannot make a check of it denied while it is offered at most
// 0.9·L in the span the algorithm counts: the estimate holds what it was
// admitted plus less than a tenth of the limit (docs/design-bound.md,
// "Leases that follow the traffic"). Below about 10·(N̂+2) (⌊L/10⌋ ≤ N̂+1)
// each instance still holds one unit, so that a rule without a divergence
// cap keeps a lease: up to N̂ units there.
func holdMost(limit, share int64) int64 {
	n := int64(1)
	if share > 0 {
		n = max(limit/share, 1)
	}
	return max((limit/10-1)/(n+1), 1)
}

// setHold sets hold and askAt from the limit, share and cap.
func (t *Table) setHold() {
	h := holdMost(t.limit.Load(), t.share.Load())
	t.hold.Store(h)
	t.askAt.Store(min(t.capv.Load(), maxCount) + h)
}

// leaseLeft returns the units of e's lease of bucket j not used yet.
func (t *Table) leaseLeft(e *hdr, j int64) int64 {
	return t.leaseAt(e, j) - t.covered(e, j, countAt(t.pend(e, t.slotOf(j)).Load(), j))
}

// NextWant returns the lease r should ask for, at now, for the bucket after
// the current one, given peak, the most units of a lease it used in a bucket
// of the window (the syncer's count, from its releases): what it has
// admitted in the current bucket (used), scaled to the whole bucket by the
// part of it that has passed (at least half), or peak, whichever is more.
// So a key that keeps its rate asks for about a bucket's worth, and one hit
// in bursts keeps a lease the size of a burst's bucket between bursts, for
// as long as a burst is in the window. Both count admissions, never units
// held: unused units do not renew themselves. It is 0 if that fits within
// what the cap serves (aheadFit), for an entry that is gone (its key's
// checks no longer see it), and for a key this instance admitted nothing of
// in the current bucket: its traffic may have moved to another instance,
// and units leased here and left unused would count against the key there
// (docs/design-bound.md, "Leases that follow the traffic"). Like Want, it
// never takes what the key holds unused past holdMost.
func (sk *syncKeys) NextWant(r verdict.Ref, now, peak int64) int64 {
	t := (*Table)(sk)
	e := entryOf(r)
	if e == nil || !t.eventual || e.state.Load() == stGone {
		return 0
	}
	k := t.geo.Index(now)
	used := t.used(e, k)
	if used == 0 {
		return 0
	}
	want := max(float64(used)/max(t.geo.Phase(now), 0.5), float64(peak))
	if want <= float64(aheadFit(t.capv.Load())) {
		return 0
	}
	return min(clampCount(int64(want+0.5)), t.unheld(e, k))
}

// aheadFit is the most a bucket's need may be for the cap and the sync
// cycle to serve it without a lease ahead (which would cost the store a call
// a bucket for nothing): twice the cap. A cap of one unit (eight instances or
// more at the default error budget) serves one check only: the check that
// takes it asks for the early sync, and the next one waits for that round
// trip; such a key is leased ahead as soon as its need passes the cap.
func aheadFit(capv int64) int64 {
	if capv <= 1 {
		return capv
	}
	return 2 * capv
}

// used returns what e has admitted in bucket k as far as its pend shows: the
// units its lease covers (they stay in pend until the lease ends) and the
// ones past them not acknowledged yet. Unused leased units are not in it.
func (t *Table) used(e *hdr, k int64) int64 {
	return countAt(t.pend(e, t.slotOf(k)).Load(), k)
}

// setLease records a grant of l.Count units in bucket l.Index: added to a
// lease of the same bucket, or in place of none (the syncer releases a lease
// of another bucket of the same parity first).
func (t *Table) setLease(e *hdr, l window.Bucket) {
	if l.Count <= 0 || !t.eventual {
		return
	}
	slot := &t.tail(e).lease[l.Index&1]
	slot.Store(pack(l.Index, countAt(slot.Load(), l.Index)+l.Count))
}
