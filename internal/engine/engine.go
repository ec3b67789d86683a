// Package engine decides checks: one Engine per rule, chosen by the rule's algorithm and mode, owns the whole decision.
//
// This package is sluice's machinery, internal to the module, with no
// compatibility promise. Programs import package sluice (and policy,
// httplimit).
//
// A check goes down once: the limiter finds the rule's Engine, the Engine
// asks the rule's per-key state (package localcache) with the counting math
// of package window, and, when the state says the store must decide, it
// hands the check to the store (package syncer) and decides by the failure
// mode if the store fails. Every path ends in the one result type, Result,
// which the limiter turns into a sluice.Decision by adding the rule's Limit.
//
// The sliding, weighted and fixed window algorithms are the first engines, one type
// per mode: Local (never touches the store), Eventual (local decisions within
// the error budget, the store at the divergence cap) and Strict (every check
// in the store). A new algorithm is a new Engine here, with its own state and
// math, not an edit across the hot path: TokenBucket and GCRA (gcra.go; with a
// WarmUp, warmup.go) and SlidingLog (slidinglog.go) are Local engines on a
// tableport.KeyTable each (keyed.go holds what they share), and Strict
// engines decided by the store's own script per check (gcrastrict.go,
// logstrict.go; strictkeyed.go holds their failure mode).
//
// counts.go counts checks by outcome and path for the metrics (Counts): the
// limiter counts every check, the store and failure-mode paths count
// themselves.
package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
)

// Result is an engine's answer to a check: a sluice.Decision without the
// rule's Limit, which the limiter adds. Every engine path ends in a Result;
// it has four fields so that it travels in registers (a five-field struct
// is spilled to memory at every return, a store-forwarding stall measured
// at 6–8 ns a hop).
//
// Errors an engine returns wrap apierr.ErrClosed or apierr.ErrStoreUnavailable
// (package sluice exports them as ErrClosed and ErrStoreUnavailable).
type Result struct {
	// Allowed reports whether the cost was admitted (sluice.Decision.Allowed).
	Allowed bool
	// Remaining is what the key has left, as this instance sees it
	// (sluice.Decision.Remaining).
	Remaining int64
	// ResetAfter is how long until the key is back to full capacity
	// (sluice.Decision.ResetAfter).
	ResetAfter time.Duration
	// RetryAfter is 0 when allowed, else when a retry of the same cost can
	// succeed (sluice.Decision.RetryAfter).
	RetryAfter time.Duration
}

// Engine decides the checks of one rule. Its methods are safe for concurrent
// use.
type Engine interface {
	// Check decides cost n for key and counts it if admitted. The caller has
	// validated n (1 ≤ n ≤ Limit) and the key's length. A denial is a
	// Result with Allowed false and a nil error.
	Check(ctx context.Context, key string, n int64) (Result, error)
	// Peek returns what Check would see for one unit of key, counting
	// nothing: Allowed reports whether it fits the window as this instance
	// sees it, Remaining what is left.
	Peek(key string) Result
	// Tick publishes the store time now (ns) for checks decided on the
	// published time.
	Tick(now int64)
	// Sweep evicts keys with nothing left in the window at now, and returns
	// how many.
	Sweep(now int64) int
	// SetFleet tells the engine the live-instance count N̂ and whether the
	// store is down; it adjusts the error budget's split at once.
	SetFleet(instances int64, down bool)
	// Take is Check decided on the clock rather than the published time
	// (a waiter retries at the moment its RetryAfter named; a refund must
	// find the bucket the admission went to): it also returns a Receipt of
	// where an admission was counted, for a Refunder's Refund.
	Take(ctx context.Context, key string, n int64) (Result, Receipt, error)
}

// Refunder is an Engine whose admissions can be taken back: Limiter.AllowAll
// refunds the rules it checked before one that denies. An engine that is
// not a Refunder (a WarmUp's packed state, a Strict TokenBucket, GCRA or
// SlidingLog, whose store scripts cannot move a key back without a second
// round trip) is checked last, so that nothing after it can deny.
type Refunder interface {
	Engine
	// Refund takes back cost n that Take admitted for key with receipt rc,
	// when another rule denied the same request. It never blocks.
	Refund(key string, n int64, rc Receipt)
}

// Config is what an engine needs to know of its rule and its limiter.
type Config struct {
	// Rule is the rule, validated, with Mode resolved (Eventual, Local or
	// Strict: never ModeDefault).
	Rule policy.Rule
	// Keys is the key bound shared by the limiter's rules.
	Keys *localcache.Keys
	// Store is the syncer's rule registration (syncer.Syncer.Rules); nil
	// for a Local rule. The engine registers its per-key state with it.
	Store syncport.Registry
	// Now returns the store time in ns.
	Now func() int64
	// Ticked makes checks read the time published by Tick instead of Now.
	Ticked bool
	// ErrorBudget is the fleet's over-admission budget, a fraction of Limit.
	ErrorBudget float64
	// FailureMode decides checks that need the store while it fails.
	FailureMode policy.FailureMode
	// SyncInterval is the store's sync period: the retry hint of a check the
	// store did not answer in time.
	SyncInterval time.Duration
	// Counts, if not nil, receives the checks the engine decides on the
	// store and failure-mode paths (Counts.Add); the caller counts every
	// check (Counts.Check).
	Counts *Counts
}

// New returns the engine for cfg's rule: its algorithm and mode choose it.
func New(cfg Config) (Engine, error) {
	if e, ok := newFixed(cfg.Rule); ok {
		return e, nil
	}
	switch cfg.Rule.Algorithm {
	case policy.SlidingWindow, policy.FixedWindow, policy.WeightedWindow:
		return newWindow(cfg)
	case policy.TokenBucket, policy.GCRA:
		return newGCRA(cfg)
	case policy.SlidingLog:
		return newSlidingLog(cfg)
	}
	return nil, fmt.Errorf("%w %q: no engine for Algorithm %v", policy.ErrInvalidRule, cfg.Rule.Name, cfg.Rule.Algorithm)
}
