package syncport

import "github.com/sluicehq/sluice/window"

// RuleConfig describes one rule to the syncer.
type RuleConfig struct {
	// Name is the rule's name, part of its Redis keys.
	Name string
	// Geometry is the rule's window geometry; its sub-window must be a whole
	// number of microseconds.
	Geometry window.Sliding
	// Limit is the rule's limit per window: reservations are decided
	// against it.
	Limit int64
	// Keys is the rule's local key state (localcache.Table.SyncKeys).
	Keys Keys
	// Leases makes every per-key call of the rule ask the store for a lease
	// (Eventual rules; see syncScript).
	Leases bool
}

// Answer is the store's decision on a reservation, with the key's window as
// the store saw it when it decided: the caller turns it into its own result
// (remaining room, retry time) with the window math of its algorithm.
type Answer struct {
	// Admitted reports whether the store admitted the cost.
	Admitted bool
	// At is the store's time of the decision, in ns.
	At int64
	// First is the bucket index of Totals[0]; Totals holds the fleet-wide
	// counts of the window's buckets, from First to the bucket of At, after
	// the decision. The slice is shared: do not modify it.
	First  int64
	Totals []int64
	// Lease is what the store granted this instance with the decision, in
	// the bucket of At: counted in Totals, and this instance's to admit.
	Lease int64
}

// Count returns bucket j's total (0 outside Totals), in the form the methods
// of window.Sliding take it.
func (a Answer) Count(j int64) int64 {
	if i := j - a.First; i >= 0 && i < int64(len(a.Totals)) {
		return a.Totals[i]
	}
	return 0
}

// GCRAAnswer is the store's decision on a check of a GCRAStore.
type GCRAAnswer struct {
	// Admitted reports whether the store admitted the cost.
	Admitted bool
	// At is the store's time of the decision, in ns (Redis TIME: whole µs).
	At int64
	// TAT is the key's theoretical arrival time after the decision, in ns:
	// At plus its debt, and At for a full bucket. It counts the units
	// leased as taken.
	TAT int64
	// Leased is the units leased to the caller with the admission (Lease).
	Leased int64
}

// LogAnswer is the store's decision on a check of a LogStore, with the log as
// it was after it.
type LogAnswer struct {
	// Admitted reports whether the store admitted the cost.
	Admitted bool
	// At is the store's time of the decision, in ns (whole µs).
	At int64
	// Count is the units in the window (At−Window, At] after the decision.
	Count int64
	// Newest is the time of the newest unit in the window, in ns; -1 if
	// there is none.
	Newest int64
	// Retry is, for a denial of a cost of at most Limit, the time of the
	// unit whose leaving the window makes room for the cost, in ns; -1
	// otherwise.
	Retry int64
}
