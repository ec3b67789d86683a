package engine

import (
	"context"

	"github.com/sluicehq/sluice/internal/syncport"
)

// strictWindow is a sliding or fixed window of a Strict rule: every check is
// decided by the store. Its paths: Check → urgent → syncport.WindowStore.Reserve →
// the store's Answer → window math; or, while the store is down, Check →
// fallback → Table.AllowDegraded by the failure mode.
type strictWindow struct{ windowRule }

// Check decides n for key in the store.
func (w *strictWindow) Check(ctx context.Context, key string, n int64) (Result, error) {
	if !w.healthy.Load() {
		return w.fallback(key, n, syncport.ErrUnavailable)
	}
	return w.urgent(ctx, key, n)
}
