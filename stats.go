package sluice

import (
	"time"

	"github.com/sluicehq/sluice/internal/syncport"
)

// Stats is a snapshot of a limiter's counters.
type Stats struct {
	// Keys is the number of keys tracked locally, across rules.
	Keys int64
	// Instances is N̂, the live-instance estimate used for the caps.
	Instances int64
	// Degraded reports whether the store is considered unreachable.
	Degraded bool
	// Sync holds the syncer's counters (zero without a store).
	Sync SyncStats
	// Waiters is the number of Wait and WaitN calls queued now.
	Waiters int64
}

// SyncStats are the counters of a limiter's syncer, the background loop
// that pushes this instance's counts to the store and pulls the fleet's
// totals, since New. Counts are cumulative; LastCycle, LastCycleKeys,
// Instances, Offset and Healthy are as of now.
type SyncStats struct {
	// Cycles is the number of full sync cycles run (about one a
	// SyncInterval).
	Cycles int64
	// UrgentCycles is the number of out-of-cycle syncs run for checks that
	// the store had to decide (reservations): those checks waited for it.
	UrgentCycles int64
	// EarlySyncs is the number of keys synced early, in the background,
	// before their checks ran out of local allowance (leases asked ahead of
	// a bucket's need included).
	EarlySyncs int64
	// KeySyncs is the number of keys pushed and pulled.
	KeySyncs int64
	// Deferred is the number of keys with counts to push that a cycle left
	// for a later one: far from their limit and their divergence cap.
	Deferred int64
	// Reservations is the number of checks decided by the store.
	Reservations int64
	// RoundTrips is the number of pipelines and single calls sent to the
	// store.
	RoundTrips int64
	// Commands is the number of commands sent (script calls, pulls and
	// heartbeats).
	Commands int64
	// Failures is the number of round trips that failed.
	Failures int64
	// Corrections is the number of correction counts pushed.
	Corrections int64
	// Retried is the number of batches resent after an ambiguous failure
	// (one after which the store may or may not have applied them).
	Retried int64
	// LastCycle is how long the last full cycle took.
	LastCycle time.Duration
	// LastCycleKeys is the number of keys synced in the last full cycle.
	LastCycleKeys int64
	// Instances is N̂ at the last heartbeat.
	Instances int64
	// Offset is the store's clock minus this instance's clock.
	Offset time.Duration
	// Healthy reports whether the last round trip to the store succeeded.
	Healthy bool
	// Waits counts the checks handed to the store for want of local
	// allowance, by why.
	Waits SyncWaits
	// Rebuilds is the number of losses of the store's data seen (a flushed
	// or replaced Redis), each followed by a restore of the keys in view.
	Rebuilds int64
}

// SyncWaits counts the checks of Eventual rules' keys that had no local
// allowance left and waited for the store, by why, as the check saw the
// key's state when it handed itself over.
type SyncWaits struct {
	// Near: the window held 0.9·Limit or more with the check; no lease is
	// given from the last tenth, the divergence cap alone.
	Near int64
	// New: a key never synced by this instance, whose first admissions used
	// its cap before its first sync came back.
	New int64
	// Start: a key whose lease was of an earlier sub-window; the current one
	// started on the cap alone.
	Start int64
	// Lease: a key whose lease of the current sub-window and cap ran out
	// before more came.
	Lease int64
	// Cap: a key without a lease whose cap ran out before a sync came back.
	Cap int64
}

// Stats returns the limiter's counters.
func (l *Limiter) Stats() Stats {
	s := Stats{Keys: l.keys.Usage().Len(), Instances: l.nhat.Load(), Degraded: l.degraded.Load(), Waiters: l.waiters.Load()}
	if l.sync != nil {
		s.Sync = syncStats(l.sync.Stats())
	}
	return s
}

// syncStats is the syncer's counters as the limiter exports them.
func syncStats(s syncport.Stats) SyncStats {
	return SyncStats{
		Cycles:        s.Cycles,
		UrgentCycles:  s.UrgentCycles,
		EarlySyncs:    s.EarlySyncs,
		KeySyncs:      s.KeySyncs,
		Deferred:      s.Deferred,
		Reservations:  s.Reservations,
		RoundTrips:    s.RoundTrips,
		Commands:      s.Commands,
		Failures:      s.Failures,
		Corrections:   s.Corrections,
		Retried:       s.Retried,
		LastCycle:     s.LastCycle,
		LastCycleKeys: s.LastCycleKeys,
		Instances:     s.Instances,
		Offset:        s.Offset,
		Healthy:       s.Healthy,
		Waits:         SyncWaits(s.Waits),
		Rebuilds:      s.Rebuilds,
	}
}
