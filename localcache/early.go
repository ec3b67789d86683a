package localcache

import "github.com/sluicehq/sluice/internal/verdict"

// Early syncs. A check on an Eventual key waits for the store only when its
// instance has no local allowance left (OverCap): the divergence cap and the
// lease both ran out. So an admission that leaves the key with half of its
// allowance or less, while the allowance is bound by the cap (the window
// itself has more room: a sync can widen it), asks the syncer for an early
// sync of the key, in the background: the sync pushes the key's pending
// counts (the cap is whole again once they are acknowledged) and asks for a
// lease, while checks go on passing on the other half. A key asks at most
// once until that sync has settled. Nothing here changes what a check
// admits, only when the syncer hears of the key: the bound is the cap's.

// earlyEnd ends the early list; earlyBusy marks an entry taken off the list
// by the syncer whose sync has not settled yet. Neither is ever an entry of
// a table.
var earlyEnd, earlyBusy = new(hdr), new(hdr)

// afterAdmit does what follows an admission that brought the current
// bucket's pend of e to c, by a check of cost n, with budget the most that
// pend may reach and room what the window allows (Limit minus the estimate
// without the current pend):
//
//   - it asks for an early sync if the admission left half of budget or
//     less, while budget is below room: only then can a sync widen what
//     this instance may admit locally;
//   - it queues a parked key (need.go) that the admission took to half of
//     budget;
//   - it catches up a late ticker at each catchUpEvery-th unit (clock.go).
//
// It is small enough to inline on the fast path: the rest is in after.
func (t *Table) afterAdmit(e *hdr, c, budget, room, n int64) {
	if 2*c >= budget || c&(catchUpEvery-1) < n {
		t.after(e, c, budget, room, n)
	}
}

// after is the out-of-line part of afterAdmit. A key whose lease is held to
// holdMost (Want) asks once it has half of the most it may hold, its cap
// and holdMost, or less: with the lease's units used counted in c, 2·c ≥
// budget alone would hold for most of the bucket, and every admission
// after a sync settled would ask again.
func (t *Table) after(e *hdr, c, budget, room, n int64) {
	if 2*c >= budget && budget < room && 2*(budget-c) <= t.askAt.Load() {
		t.ask(e, budget-c)
	}
	t.unparkNear(e, c, budget)
	if c&(catchUpEvery-1) < n {
		t.catchUp()
	}
}

// ask queues e, left with left units of local allowance, on the early list,
// unless it is there already or its early sync has not settled, and wakes
// the syncer. Only a healthy Eventual table asks (a table on its failure
// mode has no cap to refresh), and only for a busy key (busy): a quiet one
// waits for the next sync cycle, which refreshes its cap too.
func (t *Table) ask(e *hdr, left int64) {
	if !t.eventual || health(t.health.Load()) != healthy {
		return
	}
	link := &t.tail(e).early
	if link.Load() != nil || !t.busy(e, left) || !link.CompareAndSwap(nil, earlyEnd) {
		return
	}
	for {
		h := t.early.Load()
		next := h
		if next == nil {
			next = earlyEnd
		}
		link.Store(next)
		if t.early.CompareAndSwap(h, e) {
			break
		}
	}
	if f := t.wake.Load(); f != nil {
		(*f)()
	}
}

// busy reports whether e may use up the left units of its local allowance
// before the next sync cycle: whether it has used them all already (its next
// check would wait for the store), holds a lease of the current bucket (it
// needed more than its cap in this bucket already), or its part of the
// bucket before (part) is at least half of left. A key of the long tail, a
// few checks a bucket across the fleet, is not: its early syncs would cost
// the store a per-key call each for nothing, and the cycle acknowledges its
// counts long before it reaches its cap. A key never synced here has no
// history to tell: it counts as busy within the table's budget of such asks
// (newAsk), and otherwise not (if it is hit hard at once, its first check
// past the cap waits, and asks for a lease).
func (t *Table) busy(e *hdr, left int64) bool {
	k := t.geo.Index(t.now.Load())
	if left <= 0 || t.leaseAt(e, k) > 0 || t.span < 2 {
		return true // a fixed window has no bucket before in its ring to tell
	}
	if 2*t.part(e, k) >= float64(left) {
		return true
	}
	return e.synced.Load() == 0 && t.newAsk()
}

// newAsks is how many keys never synced may ask for an early sync at their
// first admissions in a sub-window, per table (newAsk). With a cap of two
// units (four instances at the default error budget), a new key asked at
// its second admission, and its third, arriving before that sync came back
// (3 % of the new keys of the load test's churn profile, checked 100 times
// a second per instance), waited for the store: the most of the slow checks
// of keys within their limit there (44 of a run's 40,000 at the median,
// against 8 with this budget, five alternating runs). Four a sub-window
// serve a churn of up to about 40 new keys a second per instance at a 1 s
// window, and cost the store at most as many per-key calls a second where
// most new keys are checked once (a million-key long tail).
const newAsks = 4

// newAsk takes one of the table's early asks of new keys (t.newRate on the
// published time, its TAT t.newDue); false if none is left.
func (t *Table) newAsk() bool {
	now := t.now.Load()
	for {
		tat := t.newDue.Load()
		next, ok := t.newRate.Admit(tat, now, 1)
		if !ok {
			return false
		}
		if t.newDue.CompareAndSwap(tat, next) {
			return true
		}
	}
}

// part is this instance's part of what the fleet admitted in the bucket
// before k: that bucket's total as last pulled, times Share/Limit (one N̂-th
// of it). It sizes a busy key's lease (Want) and tells a busy key (busy).
func (t *Table) part(e *hdr, k int64) float64 {
	limit := t.limit.Load()
	if t.span < 2 || limit <= 0 {
		return 0
	}
	prev := countAt(t.glob(e, t.slotOf(k-1)).Load(), k-1)
	return float64(prev) * float64(t.share.Load()) / float64(limit)
}

// OnEarly sets the function an early sync's request calls, after queuing its
// key, to wake the syncer. The syncer sets it once, when it adds the rule.
func (sk *syncKeys) OnEarly(wake func()) {
	t := (*Table)(sk)
	t.wake.Store(&wake)
}

// Early appends the keys that asked for an early sync since the last call
// and returns the extended slice; each stays marked until Settle records its
// sync, so that it does not ask again meanwhile. Only one goroutine may call
// it (the syncer's loop).
func (sk *syncKeys) Early(dst []verdict.Ref) []verdict.Ref {
	t := (*Table)(sk)
	for e := t.early.Swap(nil); e != nil && e != earlyEnd; {
		link := &t.tail(e).early
		next := link.Load()
		link.Store(earlyBusy)
		dst = append(dst, e)
		e = next
	}
	return dst
}

// settled lets e ask for an early sync again, once a sync of it has
// settled (Settle).
func (t *Table) settled(e *hdr) {
	t.tail(e).early.CompareAndSwap(earlyBusy, nil)
}
