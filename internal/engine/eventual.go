package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/apierr"
	"github.com/sluicehq/sluice/internal/verdict"
)

// eventualWindow is a sliding or fixed window of an Eventual rule: decided
// locally within this instance's share of the error budget, by the store at
// the divergence cap. Its paths:
//
//   - fast and slow: Check → Table.Allow → window math (allowed or denied);
//   - urgent: the verdict is OverCap → urgent → syncport.WindowStore.Reserve → the
//     store's Answer → window math;
//   - untracked: the verdict is Untracked (the admission rule keeps the key
//     out of the local cache) → reserve, with no local state → the store
//     decides on the key's fleet-wide count → window math;
//   - fallback: the store failed the urgent check → fallback →
//     Table.AllowDegraded by the failure mode.
type eventualWindow struct{ windowRule }

// Check decides n for key. It is kept small: what the per-key state decided
// on its own (an admission, a denial) returns at once; the store's paths are
// in rest.
func (w *eventualWindow) Check(ctx context.Context, key string, n int64) (Result, error) {
	if w.ticked {
		v := w.table.Allow(key, n)
		switch v.Status {
		case verdict.Allowed: // written here so that the admission inlines
			return Result{Allowed: true, Remaining: v.Remaining, ResetAfter: w.table.ResetAfter()}, nil
		case verdict.OverLimit:
			return w.denied(v, key, w.table.Now()), nil
		}
		return w.rest(ctx, key, n, v, w.table.Now(), w.table.ResetAfter())
	}
	now, reset := w.clock()
	return w.rest(ctx, key, n, w.table.AllowAt(key, now, n), now, reset)
}

// rest decides what the per-key state, at now, did not admit at once.
func (w *eventualWindow) rest(ctx context.Context, key string, n int64, v verdict.Verdict, now int64, reset time.Duration) (Result, error) {
	switch v.Status {
	case verdict.OverCap:
		res, _, err := w.overCap(ctx, key, n)
		return res, err
	case verdict.Untracked:
		return w.reserve(ctx, key, nil, n)
	case verdict.StoreDown:
		w.counts.Add(PathFallback, OutcomeError)
		return Result{ResetAfter: reset}, fmt.Errorf("%w: the failure mode is fail-closed", apierr.ErrStoreUnavailable)
	}
	return w.local(v, key, now, reset), nil
}
