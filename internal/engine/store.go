package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/internal/apierr"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
)

// urgent hands a check to the store with the key's local state, if the
// admission rule lets the key have one (see reserve).
func (w *windowRule) urgent(ctx context.Context, key string, n int64) (Result, error) {
	res, _, err := w.urgentAt(ctx, key, n)
	return res, err
}

// urgentAt is urgent with the receipt of an admission (take.go).
func (w *windowRule) urgentAt(ctx context.Context, key string, n int64) (Result, Receipt, error) {
	ref, _ := w.table.Control().Ref(key) // nil if untracked: nothing local to sync, the store decides alone
	return w.reserveAt(ctx, key, ref, n)
}

// overCap hands to the store a check of an Eventual key whose instance has
// no local allowance left for it (the table said OverCap), after counting
// why (syncport.Stats.Waits); it returns what urgentAt does.
func (w *windowRule) overCap(ctx context.Context, key string, n int64) (Result, Receipt, error) {
	ref, _ := w.table.Control().Ref(key) // nil if gone since: untracked
	w.store.Waited(w.table.Control().Why(ref, w.now(), n))
	return w.reserveAt(ctx, key, ref, n)
}

// reserve hands a check to the store: the key's pending counts, if it has a
// local entry (ref), travel with it (an urgent sync), and the store decides
// on the fleet's totals; a key the table does not track (nil ref) is decided
// there exactly, on its fleet-wide count alone. It waits at most the
// syncer's Timeout or ctx's deadline; if the store fails, the failure mode
// decides.
func (w *windowRule) reserve(ctx context.Context, key string, ref verdict.Ref, n int64) (Result, error) {
	res, _, err := w.reserveAt(ctx, key, ref, n)
	return res, err
}

// reserveAt is reserve with the receipt of an admission: the store's time
// if the store decided, the local time if the failure mode did.
func (w *windowRule) reserveAt(ctx context.Context, key string, ref verdict.Ref, n int64) (Result, Receipt, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	a, err := w.store.Reserve(ctx, key, ref, n)
	if err == nil {
		res := w.answer(a, n)
		w.counts.Add(w.path, OutcomeOf(res.Allowed, nil))
		return res, Receipt{At: a.At, Store: true}, nil
	}
	switch {
	case errors.Is(err, syncport.ErrClosed):
		w.counts.Add(w.path, OutcomeError)
		return Result{}, Receipt{}, apierr.ErrClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		w.counts.Add(w.path, OutcomeError)
		return Result{}, Receipt{}, fmt.Errorf("sluice: check abandoned: %w", err)
	case errors.Is(err, syncport.ErrTimeout) && w.mode == policy.FailLocal && w.path == PathStrict:
		// The store is up but did not answer in time, for a Strict rule
		// (which promises the store's decision). Deny, and let the caller
		// retry once the store has caught up.
		w.counts.Add(PathFallback, OutcomeDenied)
		return Result{ResetAfter: max(w.table.ResetAt(key, w.now()), w.interval), RetryAfter: w.interval}, Receipt{}, nil
	}
	// An Eventual rule's check that the store did not answer in time under
	// FailLocal is decided as if the store were down
	// (docs/design-bound.md, "When Redis does not answer in time"): a
	// tracked key within this instance's part of the room its last pull
	// left, its count pushed with the key's next sync; a key without local
	// state on the rule's sketch of untracked keys, within the share L/N̂
	// (a first check is not denied for want of state). A reservation the store admitted after all is
	// taken back by a correction.
	return w.fallbackAt(key, n, err)
}

// answer turns the store's answer into a Result, with the window math on
// the totals the store decided on. A denial resets when the newest bucket
// holding a count of the fleet's leaves the window (window.Sliding.ResetAt),
// never before its RetryAfter.
func (w *windowRule) answer(a syncport.Answer, n int64) Result {
	d := Result{
		Allowed:    a.Admitted,
		Remaining:  max(w.geo.Parts(a.At, a.Count).Room(w.limit.Load())+a.Lease, 0),
		ResetAfter: w.geo.ResetAfter(a.At),
	}
	if !a.Admitted {
		reset := w.geo.ResetAt(a.At, a.Count)
		d.RetryAfter = retry(w.geo.RetryAfter(a.At, w.limit.Load(), n, a.Count), reset)
		d.ResetAfter = max(reset, d.RetryAfter)
	}
	return d
}

// fallback decides a check the store failed by the failure mode, counting
// what it admits locally (to push once the store is back).
func (w *windowRule) fallback(key string, n int64, cause error) (Result, error) {
	res, _, err := w.fallbackAt(key, n, cause)
	return res, err
}

// fallbackAt is fallback with the receipt of an admission.
func (w *windowRule) fallbackAt(key string, n int64, cause error) (Result, Receipt, error) {
	now, reset := w.clock()
	v := w.table.AllowDegraded(key, now, n, w.mode)
	if v.Status == verdict.StoreDown {
		w.counts.Add(PathFallback, OutcomeError)
		return Result{Remaining: v.Remaining, ResetAfter: reset}, Receipt{}, fmt.Errorf("%w: %w", apierr.ErrStoreUnavailable, cause)
	}
	res := w.local(v, key, now, reset)
	w.counts.Add(PathFallback, OutcomeOf(res.Allowed, nil))
	return res, Receipt{At: now}, nil
}
