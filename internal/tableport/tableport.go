// Package tableport holds the sides of package localcache's tables that only
// one other package of the library uses, as interfaces: the per-key
// algorithms' tables as an engine (package internal/engine) holds them
// (KeyTable); the views the tables hand out to the engines, a LeaseTable's
// store side (Leases) and a Table's control side (Control, with its Limits);
// and the key bound's usage, which the limiter (package sluice) reads
// (KeyUsage). It lives apart from them so that the tables export only what
// their users call on them directly.
package tableport

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
)

// KeyTable is the per-key state of one rule whose algorithm decides each key
// on its own state, in this process: localcache's GCRATable (TokenBucket and
// GCRA), WarmTable (either with a WarmUp) and LogTable (SlidingLog). It is
// the seam between an engine and that state. Times are nanoseconds on the
// store clock; methods are safe for concurrent use.
type KeyTable interface {
	// Allow decides cost n for key at now and records it if admitted.
	Allow(key string, now, n int64) verdict.Outcome
	// Peek returns what a check of one unit would see at now, recording
	// nothing.
	Peek(key string, now int64) verdict.Outcome
	// Sweep evicts the keys whose state at now is that of a key never
	// seen, and returns how many.
	Sweep(now int64) int
}

// Leases is an Eventual bucket's lease table as the engine's store path
// sees it (localcache.LeaseTable.Leases): the lease each entry may hold,
// the denials the store's last answer decides, the tickets of the checks
// that ask the store, and the store's answers. The engine calls it as
// table.Leases().X, which the compiler devirtualizes.
type Leases interface {
	// SetLease sets the most units an entry may hold (window.SplitBucket:
	// ⌊pool/(N̂+1)⌋ for N̂ live instances). An entry holding more keeps it
	// until spent.
	SetLease(most int64)
	// Denied reports whether the store denies cost n for key at now for
	// sure, and the denial: the store's TAT is at least the last one it
	// told this instance, so a cost that TAT denies is denied until its
	// RetryAfter, exactly, without a round trip. now must be the clock's.
	Denied(key string, now, n int64) (verdict.Outcome, bool)
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

// Control is a window rule's Table as the engine's rule glue sees it
// (localcache.Table.Control): its clock (Tick), its limits, and what the
// store path and Peek read of a key. A check's own calls (Allow, AllowAt,
// AllowDegraded, Refund, Now, ResetAfter, ResetAt) stay on the Table.
type Control interface {
	// Tick publishes the current time for the table's Allow. The published
	// time never goes back.
	Tick(now int64)
	// SetLimits changes the cap, share and store state, and invalidates
	// every cached budget.
	SetLimits(l Limits)
	// SetLimit changes the rule's limit per window, keeping every count,
	// and invalidates every cached budget: the next check of each key
	// plans on the new limit.
	SetLimit(limit int64)
	// Limits returns the current limits.
	Limits() Limits
	// Ref returns key's entry, creating it if the admission rule lets key
	// in (the call counts as a sighting of key); ok is false, and the Ref
	// nil, if key stays untracked: it has no local state to sync.
	Ref(key string) (r verdict.Ref, ok bool)
	// Why returns why a check of cost n of r's key at now had no local
	// allowance left (the table's Allow said verdict.OverCap). A key
	// without an entry (nil r) is syncport.WhyNew.
	Why(r verdict.Ref, now, n int64) syncport.Why
	// RoomReset returns how many units the admit test
	// (window.Estimate.Room) would let key pass at now, as this instance
	// sees the window, and how long until the window holds nothing of the
	// key (the table's ResetAt), with one lookup: a Peek.
	RoomReset(key string, now int64) (room int64, reset time.Duration)
	// Estimate returns the windowed estimate for key at now, and this
	// instance's own unacknowledged count in the window; ok is false if
	// the key is not tracked. The syncer's tests read it.
	Estimate(key string, now int64) (est float64, own int64, ok bool)
}

// Limits are the parts of a Table's behaviour that change while it runs
// (Control.SetLimits).
type Limits struct {
	// Cap bounds this instance's unacknowledged count in the window (Eventual
	// tables while the store is up). NoCap disables it.
	Cap int64
	// Share bounds this instance's own count in the window while the store
	// is down under FailLocal.
	Share int64
	// Down is set while the store is unreachable: checks are then decided by
	// Mode.
	Down bool
	// Mode is the failure mode that decides while Down.
	Mode policy.FailureMode
	// Recovering is set, with the store up again after an outage under
	// FailLocal, until every instance has had time to push its outage
	// counts: a check is then decided here, admitted while the window as
	// this instance sees it holds at most Share less the cost (room for
	// the others' outage counts it cannot see yet, at most (N̂−1)·Share),
	// and never sent to the store. Ignored while Down.
	Recovering bool
}

// NoCap is a Limits.Cap that never binds.
const NoCap = math.MaxInt64

// KeyUsage is the limiter's look at its key bound (localcache.Keys.Usage),
// for its stats and its sweeps: the one side of the bound that only the
// limiter reads. The limiter calls it as keys.Usage().X, which the compiler
// devirtualizes.
type KeyUsage interface {
	// Len returns the number of tracked keys.
	Len() int64
	// Untracked returns how many checks found their key without an entry
	// and not let in by the admission rule, since the bound was made
	// (across the tables that share it).
	Untracked() int64
	// Full reports, and clears, whether a new key has been refused at the
	// bound since the last call: a hint to sweep now.
	Full() bool
}
