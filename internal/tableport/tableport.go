// Package tableport holds the sides of package localcache's tables that
// only the engines (package internal/engine) use, as interfaces the tables
// hand out: a LeaseTable's store side (Leases). It lives apart from both so
// that the tables export only what a check calls; none of it is on a
// check's fast path.
package tableport

import "github.com/sluicehq/sluice/internal/verdict"

// Leases is an Eventual bucket's lease table as the engine's store path
// sees it (localcache.LeaseTable.Leases): the lease each entry may hold,
// the tickets of the checks that ask the store, and the store's answers.
type Leases interface {
	// SetLease sets the most units an entry may hold
	// (window.SharedBucket.Lease of the live instances). An entry holding
	// more keeps it until spent.
	SetLease(most int64)
	// Ask returns the ticket of a check of key that the table's Allow sent
	// to the store. The caller must Settle it once the store answered or
	// failed.
	Ask(key string) verdict.Ticket
	// Settle records the store's answer to a ticket's check: the store
	// time it carried (at), which the table's Denied reads the store's
	// clock as at least; the key's TAT in the store after it (tat); and
	// the units it leased, which the entry then holds (up to the most set
	// by SetLease: any more are dropped, spent by nobody). at and tat are
	// verdict.NoAnswer if the store did not answer. It returns the units
	// the entry holds.
	Settle(tk verdict.Ticket, at, tat, leased int64) (held int64)
	// Owe records that the failure mode admitted n units of key (negative:
	// it took an admission back), which the next check that asks the store
	// charges it with (Ticket.Owed). A key without an entry owes nothing:
	// the store cannot be told of it.
	Owe(key string, n int64)
	// TAT returns key's TAT in the store at its last answer (ns, store
	// clock), or 0 if the store has not answered a check of key.
	TAT(key string) int64
}
