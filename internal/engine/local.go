package engine

import (
	"context"

	"github.com/sluicehq/sluice/internal/verdict"
)

// localWindow is a sliding or fixed window of a Local rule: decided in this
// process only. Its path: Check → Table.Allow (fast path, else slow path) →
// window math.
type localWindow struct{ windowRule }

// Check decides n for key on the per-key state.
func (w *localWindow) Check(_ context.Context, key string, n int64) (Result, error) {
	if w.ticked {
		v := w.table.Allow(key, n)
		if v.Status == verdict.Allowed { // written here so that the admission inlines
			return Result{Allowed: true, Remaining: v.Remaining, ResetAfter: w.table.ResetAfter()}, nil
		}
		return w.denied(v, key, w.table.Now()), nil
	}
	now, reset := w.clock()
	return w.local(w.table.AllowAt(key, now, n), key, now, reset), nil
}
