package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/localcache"
)

// eventualWindow is a sliding or fixed window of an Eventual rule: decided
// locally within this instance's share of the error budget, by the store at
// the divergence cap. Its paths:
//
//   - fast and slow: Check → Table.Allow → window math (allowed or denied);
//   - urgent: the verdict is OverCap → urgent → syncer.Rule.Reserve → the
//     store's Answer → window math;
//   - fallback: the store failed the urgent check → fallback →
//     Table.AllowDegraded by the failure mode.
type eventualWindow struct{ *windowRule }

// Check decides n for key.
func (w *eventualWindow) Check(ctx context.Context, key string, n int64) (Result, error) {
	var v localcache.Verdict
	var reset time.Duration
	if w.ticked {
		v, reset = w.table.Allow(key, n), w.table.ResetAfter()
	} else {
		var now int64
		now, reset = w.clock()
		v = w.table.AllowAt(key, now, n)
	}
	switch v.Status {
	case localcache.OverCap:
		return w.urgent(ctx, key, n)
	case localcache.StoreDown:
		return Result{ResetAfter: reset}, fmt.Errorf("%w: the failure mode is fail-closed", ErrStoreUnavailable)
	}
	return w.local(v, reset), nil
}
