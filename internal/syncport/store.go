package syncport

import (
	"context"
	"sync/atomic"
	"time"
)

// WindowStore is a window rule of the syncer, as the engine of an Eventual
// or Strict window rule uses it (Registry.AddRule).
type WindowStore interface {
	// Reserve asks the store to decide cost n for key and waits for the
	// answer; h is the key's local entry (Keys), or nil.
	Reserve(ctx context.Context, key string, h any, n int64) (Answer, error)
	// Waited counts a check of the rule that had no local allowance left
	// and is handed to the store (Reserve), by why.
	Waited(why Why)
	// Refund takes back cost n that the store admitted for key at store
	// time at (Answer.At): it is pushed as a negative correction of the
	// bucket of at with the key's next sync. h is the key's local entry,
	// or nil. It never blocks on the store.
	Refund(key string, h any, at, n int64)
	// SetLimit changes the limit the store decides reservations against.
	SetLimit(limit int64)
	// Retire takes the rule out of the syncer once its keys are synced.
	Retire()
	// Health is the syncer's health: true while the store is judged
	// healthy. The engine keeps the pointer and loads it per check.
	Health() *atomic.Bool
	// OldestHeartbeat is the store time of the oldest heartbeat of the
	// live instances the syncer last saw, ns.
	OldestHeartbeat() int64
	// Joining reports that the fleet may not count this instance yet.
	Joining() bool
	// InstanceTTL is how long a silent instance stays in the registry.
	InstanceTTL() time.Duration
}

// GCRAStore is a TokenBucket or GCRA rule kept in the store
// (Registry.AddGCRA): each check is one call of the store's script.
type GCRAStore interface {
	// Decide asks the store to decide cost n for key; with peek it decides
	// nothing and records nothing, and Admitted reports whether one unit
	// fits.
	Decide(ctx context.Context, key string, n int64, peek bool) (GCRAAnswer, error)
	// LeaseAbove decides cost n for key and leases up to want units more
	// to the caller, deciding on tat if the store's TAT for key is below
	// it (a store that lost the key), after taking owed units, which the
	// failure mode admitted meanwhile, from the bucket.
	LeaseAbove(ctx context.Context, key string, n, want, tat, owed int64) (GCRAAnswer, error)
}

// LogStore is a SlidingLog rule kept in the store (Registry.AddLog).
type LogStore interface {
	// Decide asks the store to decide cost n for key; with peek it decides
	// nothing and records nothing (expired units may still be dropped),
	// and Admitted reports whether one unit fits.
	Decide(ctx context.Context, key string, n int64, peek bool) (LogAnswer, error)
}
