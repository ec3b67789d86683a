// Package sluice is a rate limiter for fleets of service instances.
//
// Each instance decides locally in nanoseconds, a background syncer
// converges the fleet through Redis, and a declared error budget bounds how
// far the fleet may over-admit.
//
// A Limiter holds rules (package policy), each decided by an engine chosen
// by the rule's algorithm and mode. For an Eventual
// rule, a check finds the key's entry in a lock-free local cache (package
// localcache) and admits the cost if the key's sliding-window estimate
// (package window) has room and this instance's unsynced count for the key
// stays within its share of the error budget, the divergence cap
//
//	cap = ErrorBudget · Limit / (N̂ + 1)
//
// where N̂ is the number of live instances in the registry. Within the cap a
// check costs one compare-and-swap; at the cap the check is handed to Redis,
// batched with the key's pending counts (an urgent sync), so the fleet as a
// whole never admits more than Limit·(1+ErrorBudget) per window while N̂ is at
// least the real fleet size. The background syncer (package syncer) pushes
// every key's counts and pulls the merged totals once a SyncInterval.
//
// See docs/design.md for the architecture, the Redis layout and the accuracy
// argument.
package sluice

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/apierr"
)

// Errors returned by New, Allow, AllowN, Flush and Close. A denial is not an
// error: it is a Decision with Allowed false.
var (
	// ErrInvalidOptions is wrapped by New's errors about Options.
	ErrInvalidOptions = errors.New("sluice: invalid options")
	// ErrUnknownRule means Allow named a rule the limiter does not have.
	ErrUnknownRule = errors.New("sluice: unknown rule")
	// ErrInvalidCost means AllowN's cost was below 1 or above the rule's
	// limit, or its Burst for a TokenBucket or GCRA (such a cost could never
	// be admitted).
	ErrInvalidCost = errors.New("sluice: invalid cost")
	// ErrKeyTooLong means the key is longer than Options.MaxKeyLength.
	ErrKeyTooLong = errors.New("sluice: key too long")
	// ErrClosed means the limiter was closed.
	ErrClosed = apierr.ErrClosed
	// ErrStoreUnavailable means the check needed the store, the store failed,
	// and the failure mode is [policy.FailClosed]. The Decision is a denial. New
	// wraps it too, with Options.RequireStore, when the store cannot be
	// reached or refuses writes at start.
	ErrStoreUnavailable = apierr.ErrStoreUnavailable
	// ErrStoreConfig is wrapped by New's errors about a store that refuses
	// this client: wrong or missing credentials, an ACL user without the
	// commands or the keys sluice needs, scripting disabled. The error says
	// what to change.
	ErrStoreConfig = apierr.ErrStoreConfig
)

// Clock is a source of time for a Limiter, for tests and simulation.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}
