package localcache

import (
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
)

// The lease table's store side: what the engine calls around a check that
// asks the store (the tickets and the answers) and when the fleet changes
// (the lease), none of it on the path of a check the units held decide.

// leaseStore is a LeaseTable as the engine's store path sees it
// (tableport.Leases): its methods are that side of the table, apart from
// the checks' side.
type leaseStore LeaseTable

// Leases returns the table's store side, for the engine's store path.
func (t *LeaseTable) Leases() tableport.Leases { return (*leaseStore)(t) }

// SetLease sets the most units an entry may hold (window.SplitBucket:
// ⌊pool/(N̂+1)⌋ for N̂ live instances). An entry holding more keeps it until
// spent.
func (ls *leaseStore) SetLease(most int64) { ls.most.Store(max(most, 0)) }

// Denied reports whether the store denies cost n for key at now for sure,
// and the denial: the store's TAT is at least the last one it told this
// instance, so a cost that TAT denies is denied until its RetryAfter,
// exactly, without a round trip (a flood of denied checks stays local).
// now must be the clock's: the decision depends on it. It is taken as at
// least the latest answer's time (Settle): the estimate of the store's clock
// trails it by up to half a round trip, and on it alone the check right
// after the one that took the next-to-last unit was denied, with a
// RetryAfter of that lag, where the store admits it.
func (ls *leaseStore) Denied(key string, now, n int64) (verdict.Outcome, bool) {
	e, ok := ls.keys.m.Load(key)
	if !ok {
		return verdict.Outcome{}, false
	}
	now = max(now, ls.seen.Load())
	tat := e.tat.Load()
	if _, ok := ls.g.Admit(tat, now, n); ok || tat == tatFresh {
		return verdict.Outcome{}, false
	}
	return verdict.Outcome{
		Remaining:  max(e.held.Load(), 0) + ls.g.Remaining(tat, now),
		ResetAfter: ls.g.ResetAfter(tat, now),
		RetryAfter: ls.g.RetryAfter(tat, now, n),
	}, true
}

// Ask returns the ticket of a check of key that LeaseTable.Allow sent to the store. The
// caller must Settle it once the store answered or failed.
func (ls *leaseStore) Ask(key string) verdict.Ticket {
	e, ok := ls.keys.m.Load(key)
	if !ok {
		return verdict.Ticket{}
	}
	floor, owed := e.storeTAT(), int64(0)
	if e.owed.Load() != 0 {
		owed = e.owed.Swap(0)
	}
	if !e.asking.CompareAndSwap(false, true) {
		return verdict.Ticket{Ref: e, TAT: floor, Owed: owed}
	}
	h := e.held.Load()
	want := ls.most.Load() - h // ≤ 0 if h is heldGone
	if h == heldGone || want <= 0 {
		e.asking.Store(false)
		return verdict.Ticket{Ref: e, TAT: floor, Owed: owed}
	}
	return verdict.Ticket{Ref: e, Want: want, TAT: floor, Owed: owed}
}

// Owe records that the failure mode admitted n units of key (negative: it
// took an admission back), which the next check that asks the store
// charges it with (Ticket.Owed). A key without an entry owes nothing: the
// store cannot be told of it.
func (ls *leaseStore) Owe(key string, n int64) {
	if e, ok := ls.keys.m.Load(key); ok {
		e.owed.Add(n)
	}
}

// Settle records the store's answer to a ticket's check: the store time it
// carried (at), which Denied reads the store's clock as at least; the
// key's TAT in the store after it (tat); and the units it leased, which the entry
// then holds (up to the most set by SetLease: any more are dropped, spent by
// nobody). at and tat are NoAnswer if the store did not answer. It returns
// the units the entry holds.
func (ls *leaseStore) Settle(tk verdict.Ticket, at, tat, leased int64) (held int64) {
	raise(&ls.seen, at)
	e, _ := tk.Ref.(*leaseEntry)
	if e == nil {
		return 0
	}
	if at == verdict.NoAnswer && tk.Owed != 0 {
		e.owed.Add(tk.Owed) // not charged: the next ask carries it
	}
	raise(&e.tat, tat)
	held = (*LeaseTable)(ls).give(e, leased)
	if tk.Want > 0 {
		e.asking.Store(false)
	}
	return held
}

// TAT returns key's TAT in the store at its last answer (ns, store clock),
// or 0 if the store has not answered a check of key.
func (ls *leaseStore) TAT(key string) int64 {
	if e, ok := ls.keys.m.Load(key); ok {
		return e.storeTAT()
	}
	return 0
}
