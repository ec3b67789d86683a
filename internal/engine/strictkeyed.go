package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/apierr"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/policy"
)

// strictKeyed is what the Strict engines of the per-key algorithms
// (gcraStrict, logStrict) share: the failure mode and the local table it
// decides on while the store fails.
//
// Every check is decided by the store (one script call on the store's
// clock); a check the store does not decide is decided by the failure mode,
// as a Strict window's is:
//
//   - the store is up but did not answer in time, under FailLocal: denied,
//     with RetryAfter the sync interval (admitting locally could pass the
//     limit, since the store may still be deciding other instances' checks)
//     — a Strict rule's; an Eventual bucket's (gcraEventual, eventual) is
//     decided as below, as a window's timed-out check is;
//   - the store failed (or is marked down): FailOpen admits, FailClosed
//     denies with apierr.ErrStoreUnavailable, FailLocal decides on the local table
//     against this instance's share, the rule scaled by 1/N̂: each unit
//     costs N̂ there, so the table admits Limit/N̂ per Window with a burst
//     of Burst/N̂ (a GCRA), or Limit/N̂ in any window (the log).
//
// What the failure mode admits stays in this process: the store's state
// is the truth the next checks are decided on once it is back (except an
// Eventual bucket's under FailLocal, charged to the store: gcraEventual).
type strictKeyed struct {
	now      func() int64
	table    tableport.KeyTable
	mode     policy.FailureMode
	interval time.Duration
	share    atomic.Int64 // N̂, the cost of a unit in the local table
	counts   *Counts      // nil: not counted
	// eventual: an Eventual bucket (gcraEventual), whose check the store
	// did not answer in time is decided by the failure mode like any other
	// store failure; a Strict rule's is denied under FailLocal.
	eventual bool
}

func (k *strictKeyed) init(cfg Config, t tableport.KeyTable) {
	k.now, k.table, k.mode, k.interval = cfg.Now, t, cfg.FailureMode, cfg.SyncInterval
	k.counts = cfg.Counts
	k.share.Store(1)
}

// decided counts a check the store decided.
func (k *strictKeyed) decided(r Result) Result {
	k.counts.Add(PathStrict, OutcomeOf(r.Allowed, nil))
	return r
}

// Tick does nothing: a Strict check is decided on the store's clock.
func (k *strictKeyed) Tick(int64) {}

// Sweep evicts the local table's idle keys.
func (k *strictKeyed) Sweep(now int64) int { return k.table.Sweep(now) }

// SetFleet sets N̂ for the failure mode's share.
func (k *strictKeyed) SetFleet(instances int64, _ bool) { k.share.Store(max(instances, 1)) }

// failed decides a check the store did not decide: err is why.
func (k *strictKeyed) failed(key string, n int64, err error) (Result, error) {
	switch {
	case errors.Is(err, syncport.ErrClosed):
		k.counts.Add(PathStrict, OutcomeError)
		return Result{}, apierr.ErrClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		k.counts.Add(PathStrict, OutcomeError)
		return Result{}, fmt.Errorf("sluice: check abandoned: %w", err)
	case errors.Is(err, syncport.ErrTimeout) && k.mode == policy.FailLocal && !k.eventual:
		k.counts.Add(PathFallback, OutcomeDenied)
		return Result{RetryAfter: k.interval}, nil
	}
	switch k.mode {
	case policy.FailOpen:
		k.counts.Add(PathFallback, OutcomeAllowed)
		return Result{Allowed: true}, nil
	case policy.FailClosed:
		k.counts.Add(PathFallback, OutcomeError)
		return Result{RetryAfter: k.interval}, fmt.Errorf("%w: %w", apierr.ErrStoreUnavailable, err)
	}
	s := k.share.Load()
	r := result(k.table.Allow(key, k.now(), n*s))
	r.Remaining /= s
	k.counts.Add(PathFallback, OutcomeOf(r.Allowed, nil))
	return r, nil
}

// local is Peek's answer when the store does not answer: the local table's
// view at this instance's share.
func (k *strictKeyed) local(key string) Result {
	s := k.share.Load()
	r := result(k.table.Peek(key, k.now()))
	r.Remaining /= s
	r.Allowed = r.Remaining >= 1
	return r
}

// strictStore returns cfg's store, or an error if the rule has none.
func strictStore(cfg Config) (syncport.Registry, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w %q: Mode %v needs a store", policy.ErrInvalidRule, cfg.Rule.Name, cfg.Rule.Mode)
	}
	return cfg.Store, nil
}
