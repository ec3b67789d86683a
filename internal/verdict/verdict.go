// Package verdict holds what the per-key tables (package localcache) answer
// a check with, and what the engines (package internal/engine) read of it:
// a Table's Status and Verdict, a KeyTable's Outcome, a LeaseTable's Step
// and Ticket, and the opaque Ref to a key's entry. It lives apart from both
// so that the tables do not export their engines' vocabulary: the types are
// the tables' own, with the same layout, passed in registers.
package verdict

import (
	"fmt"
	"math"
	"time"
)

// Status is the outcome of a check on a localcache.Table.
type Status uint8

// The statuses a table decides on its own come first (Allowed, OverLimit):
// a caller can tell them from those that need the store with one compare.
const (
	// Allowed means the cost was admitted and counted.
	Allowed Status = iota
	// OverLimit means the window (or, while the store is down under
	// FailLocal, this instance's share of it) has no room for the cost.
	OverLimit
	// OverCap means the cost fits the window as this instance sees it, but
	// admitting it locally would take the instance's unsynced count past the
	// divergence cap: the store must decide (Eventual tables only; the
	// table's Ref gives the key's entry to hand to the syncer).
	OverCap
	// Untracked means the table does not track the key (the admission rule
	// keeps it out) and the store is up: the store must decide, on the key's
	// fleet-wide count, with no local state to sync (Eventual tables only).
	Untracked
	// StoreDown means the store is down and the failure mode is FailClosed.
	StoreDown
)

// String names the status.
func (s Status) String() string {
	switch s {
	case Allowed:
		return "allowed"
	case OverLimit:
		return "over-limit"
	case OverCap:
		return "over-cap"
	case Untracked:
		return "untracked"
	case StoreDown:
		return "store-down"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Verdict is a Table's per-key state's answer to a check. It has four
// words, so that it travels in registers.
type Verdict struct {
	// Status says whether and why not.
	Status Status
	// Remaining is what the window has left after this check, as this
	// instance sees it. On the fast path it is the room computed when the
	// bucket's budget was, less the bucket's count: for a sliding window it
	// can fall short of the exact room by what the oldest bucket's weight
	// lost since (never above it).
	Remaining int64
	// RetryAfter is, for OverLimit, how long until the same cost could pass
	// if nothing else were admitted; -1 if it never can.
	RetryAfter time.Duration
	// Reset is, for an OverLimit, how long until the window holds nothing
	// of the key (Table.ResetAt, read on the entry in hand, or for a key
	// without one on the sketch of untracked keys that decided it); 0 when
	// not computed: ask Table.ResetAt.
	Reset time.Duration
}

// Ref is an opaque handle to one key's entry in a table: only the table
// that produced it accepts it. It is an alias of any so that the syncer can
// name it in its own interface without importing this package.
type Ref = any

// Outcome is a KeyTable's answer to a check: the whole decision, since the
// algorithms behind KeyTable decide on one key's state alone. It has four
// words, so that it travels in registers.
type Outcome struct {
	// Allowed reports whether the cost was admitted and recorded.
	Allowed bool
	// Remaining is the largest cost the key would admit now, after this
	// check.
	Remaining int64
	// ResetAfter is how long until the key is back to its full capacity if
	// nothing more is admitted.
	ResetAfter time.Duration
	// RetryAfter is 0 when allowed; otherwise how long until the same cost
	// is admitted if nothing else is, and -1 if it never is.
	RetryAfter time.Duration
}

// Step says what a LeaseTable's Allow did.
type Step uint8

const (
	// Taken: the cost was admitted on the units held.
	Taken Step = iota
	// TakenLow: admitted, and the units held fell under half the lease
	// with no check asking the store: time to ask for more (Ask with a
	// cost of 0) before the next checks run out.
	TakenLow
	// Ask: not enough units held; the store must decide (Denied first).
	Ask
)

// Ticket is a check's claim to ask the store about its key (a LeaseTable's
// Ask): Want is the lease to ask for with it (0 if another check of the key
// is asking, the key has no entry, or it holds its whole lease already). A
// ticket with a Want is the key's one claim to a lease until it is settled.
type Ticket struct {
	// Ref is the key's entry in the table that issued the ticket, nil if
	// it has none; only that table reads it.
	Ref Ref
	// Want is the lease to ask for.
	Want int64
	// TAT is the key's TAT in the store at its last answer (ns, store
	// clock); 0 if none: a floor for the store's, which only grows, and
	// which a store that lost its data has forgotten.
	TAT int64
	// Owed is the units the failure mode admitted for the key (Owe) that
	// the store is to be charged with this check: the ticket took them
	// from the entry, and Settle gives them back if the store did not
	// answer.
	Owed int64
}

// NoAnswer is the time and the TAT to Settle a ticket with when the store
// did not answer: they tell the table nothing.
const NoAnswer = math.MinInt64
