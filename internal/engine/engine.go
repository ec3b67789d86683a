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
// mode if the store fails. Every path ends in the one result type, Decision,
// built from an engine's Result.
//
// The sliding, weighted and fixed window algorithms are the first engines, one type
// per mode: Local (never touches the store), Eventual (local decisions within
// the error budget, the store at the divergence cap) and Strict (every check
// in the store). A new algorithm is a new Engine here, with its own state and
// math, not an edit across the hot path: TokenBucket and GCRA (gcra.go; with a
// WarmUp, warmup.go) and SlidingLog (slidinglog.go) are Local engines on a
// localcache.KeyTable each (keyed.go holds what they share), and Strict
// engines decided by the store's own script per check (gcrastrict.go,
// logstrict.go; strictkeyed.go holds their failure mode).
//
// counts.go counts checks by outcome and path for the metrics (Counts): the
// limiter counts every check, the store and failure-mode paths count
// themselves.
package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/syncer"
)

// Decision is the result of a check, as the user gets it: an engine's
// Result with the rule's Limit (package sluice exports it as
// sluice.Decision).
type Decision struct {
	// Allowed reports whether the cost was admitted.
	Allowed bool
	// soft: admitted past Limit, in the rule's soft band (InSoftBand).
	soft bool
	// Limit is the rule's limit per window.
	Limit int64
	// Remaining is what the window has left, as this instance sees it. For
	// a TokenBucket or GCRA it is the whole tokens left: the largest cost
	// admitted now.
	Remaining int64
	// ResetAfter is how long until the key's quota is whole again (Limit
	// remaining, as this instance sees it) if nothing more is admitted; 0
	// if it is whole now. While nothing more is admitted, now+ResetAfter
	// never moves later, and on a denial it is never before RetryAfter.
	// For a sliding or weighted window it is until the newest sub-window
	// holding a count has left the window (after an admission: the window
	// plus the rest of the current sub-window, so it can exceed Window); for
	// a fixed window the end of the window, if it holds a count; for a
	// SlidingLog until the newest unit leaves; for a TokenBucket or GCRA
	// until the bucket is full again. A Deny rule's denials (Blocked) have
	// no reset: ResetAfter and RetryAfter are its Window, a hint only.
	ResetAfter time.Duration
	// RetryAfter is 0 when allowed; otherwise how long until a retry of the
	// same cost can succeed, if nothing else is admitted meanwhile.
	RetryAfter time.Duration
}

// Result is an engine's answer to a check: a Decision without the rule's
// Limit, which the caller adds (Decision). Every engine path ends in a
// Result; it has four fields so that it travels in registers (a five-field
// struct is spilled to memory at every return, a store-forwarding stall
// measured at 6–8 ns a hop).
type Result struct {
	// Allowed reports whether the cost was admitted (Decision.Allowed).
	Allowed bool
	// Remaining is what the key has left, as this instance sees it
	// (Decision.Remaining).
	Remaining int64
	// ResetAfter is how long until the key is back to full capacity
	// (Decision.ResetAfter).
	ResetAfter time.Duration
	// RetryAfter is 0 when allowed, else when a retry of the same cost can
	// succeed (Decision.RetryAfter).
	RetryAfter time.Duration
}

// Decision returns r as the Decision of a rule whose limit is limit.
func (r Result) Decision(limit int64) Decision {
	return Decision{Allowed: r.Allowed, Limit: limit, Remaining: r.Remaining, ResetAfter: r.ResetAfter, RetryAfter: r.RetryAfter}
}

// Errors an Engine returns; package sluice exports them under the same names.
var (
	// ErrClosed means the limiter was closed.
	ErrClosed = errors.New("sluice: limiter closed")
	// ErrStoreUnavailable means the check needed the store, the store failed,
	// and the failure mode is FailClosed. The Decision is a denial.
	ErrStoreUnavailable = errors.New("sluice: store unavailable")
)

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
	// Take is Check for a request checked against several rules
	// (Limiter.AllowAll): it also returns a Receipt of where an admission
	// was counted, for Refund.
	Take(ctx context.Context, key string, n int64) (Result, Receipt, error)
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
	// Store is the syncer; nil for a Local rule. The engine registers its
	// per-key state with it.
	Store *syncer.Syncer
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
