// Package sluice is a rate limiter for fleets of service instances: each instance decides locally in nanoseconds, a background syncer converges the fleet through Redis, and a declared error budget bounds how far the fleet may over-admit.
//
// A Limiter holds rules (package policy). For each check it finds the rule
// and the key's entry in a lock-free local cache (package localcache) and
// admits the cost if the key's sliding-window estimate (package window) has
// room and this instance's unsynced count for the key stays within its share
// of the error budget, the divergence cap
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

	"github.com/redis/go-redis/v9"
)

// Errors returned by New, Allow, AllowN, Flush and Close. A denial is not an
// error: it is a Decision with Allowed false.
var (
	// ErrInvalidOptions is wrapped by New's errors about Options.
	ErrInvalidOptions = errors.New("sluice: invalid options")
	// ErrUnknownRule means Allow named a rule the limiter does not have.
	ErrUnknownRule = errors.New("sluice: unknown rule")
	// ErrInvalidCost means AllowN's cost was below 1 or above the rule's
	// limit (such a cost could never be admitted).
	ErrInvalidCost = errors.New("sluice: invalid cost")
	// ErrKeyTooLong means the key is longer than Options.MaxKeyLength.
	ErrKeyTooLong = errors.New("sluice: key too long")
	// ErrClosed means the limiter was closed.
	ErrClosed = errors.New("sluice: limiter closed")
	// ErrStoreUnavailable means the check needed the store, the store failed,
	// and the failure mode is FailClosed. The Decision is a denial.
	ErrStoreUnavailable = errors.New("sluice: store unavailable")
)

// FailureMode says how checks that need the store are decided while it is
// unreachable or too slow.
type FailureMode uint8

const (
	// FailLocal enforces Limit/N̂ per instance locally (N̂ as last seen), keeps
	// the counts, and pushes them when the store returns. The default.
	FailLocal FailureMode = iota
	// FailOpen admits every check (still counting it, to push later).
	FailOpen
	// FailClosed denies every check that needs the store, with
	// ErrStoreUnavailable.
	FailClosed
)

// String returns the mode's name.
func (m FailureMode) String() string {
	switch m {
	case FailLocal:
		return "fail-local"
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	}
	return "FailureMode(?)"
}

// Clock is a source of time for a Limiter, for tests and simulation.
type Clock interface {
	Now() time.Time
}

// Defaults for Options fields left zero.
const (
	DefaultPrefix       = "sluice"
	DefaultSyncInterval = 100 * time.Millisecond
	DefaultErrorBudget  = 0.01
	DefaultTimeout      = 50 * time.Millisecond
	DefaultMaxKeys      = 1_000_000
	DefaultMaxKeyLength = 256
)

// Options configures a Limiter. The zero value is valid: a Limiter that only
// limits within this process.
type Options struct {
	// Redis is the shared store; nil keeps every rule local to this process.
	Redis redis.UniversalClient
	// Prefix starts every Redis key; default DefaultPrefix. 1 to 64 bytes of
	// letters, digits, '_', '.', '-' and ':'.
	Prefix string
	// SyncInterval is how often counts are pushed and totals pulled; default
	// DefaultSyncInterval, at least 1ms. A key evenly loaded at its full rate
	// needs no urgent syncs when SyncInterval ≤ ErrorBudget · Window.
	SyncInterval time.Duration
	// ErrorBudget is the most the fleet may over-admit, as a fraction of a
	// rule's Limit per window, in (0, 1]; default DefaultErrorBudget.
	ErrorBudget float64

	// InstanceID names this instance in the registry; default host name,
	// process id and a random suffix. 1 to 64 bytes of letters, digits, '_',
	// '.' and '-'; unique across the fleet.
	InstanceID string
	// FailureMode decides checks that need the store while it fails; default
	// FailLocal.
	FailureMode FailureMode
	// Timeout bounds how long a check waits for the store (an urgent sync, a
	// Strict rule); default DefaultTimeout. A check never blocks longer than
	// Timeout or its context's deadline.
	Timeout time.Duration
	// Clock replaces the system clock (tests, simulation). Store time is
	// still aligned on Redis TIME when there is a store. With the system
	// clock, checks read a time published every millisecond (rules whose
	// sub-window is under 10ms read the clock on each check).
	Clock Clock
	// MaxKeys bounds the keys tracked locally, across rules; default
	// DefaultMaxKeys. When full, checks for untracked keys share one overflow
	// entry per rule until idle keys are evicted.
	MaxKeys int
	// MaxKeyLength bounds a key's length in bytes; default
	// DefaultMaxKeyLength. Longer keys are rejected with ErrKeyTooLong.
	MaxKeyLength int
	// MinInstances is a floor on N̂, the live-instance count; default 1. Set
	// it to the fleet size to keep the bound while instances are starting.
	MinInstances int
	// BatchSize is the number of keys per Redis pipeline; default 256.
	BatchSize int
}

// Decision is the result of a check.
type Decision struct {
	// Allowed reports whether the cost was admitted.
	Allowed bool
	// Limit is the rule's limit per window.
	Limit int64
	// Remaining is what the window has left, as this instance sees it.
	Remaining int64
	// ResetAfter is how long until the window no longer holds anything
	// counted now.
	ResetAfter time.Duration
	// RetryAfter is 0 when allowed; otherwise how long until a retry of the
	// same cost can succeed, if nothing else is admitted meanwhile.
	RetryAfter time.Duration
}
