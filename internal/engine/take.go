package engine

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/apierr"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/verdict"
)

// Receipt says where Take counted an admission, so that Refund can take it
// back from the same place: At is the time it was decided at (the store's,
// if the store decided), Store whether the store counted it.
type Receipt struct {
	At    int64
	Store bool
}

// Take decides n for key on the clock (not the published time: a refund must
// find the bucket the admission went to).
func (w *localWindow) Take(_ context.Context, key string, n int64) (Result, Receipt, error) {
	now, reset := w.clock()
	return w.local(w.table.AllowAt(key, now, n), key, now, reset), Receipt{At: now}, nil
}

// Refund lowers the key's pending count in the bucket of the admission.
func (w *localWindow) Refund(key string, n int64, rc Receipt) { _, _ = w.table.Refund(key, rc.At, n) }

// Take decides n for key as Check does, on the clock.
func (w *eventualWindow) Take(ctx context.Context, key string, n int64) (Result, Receipt, error) {
	now, reset := w.clock()
	v := w.table.AllowAt(key, now, n)
	switch v.Status {
	case verdict.OverCap:
		return w.overCap(ctx, key, n)
	case verdict.Untracked:
		return w.reserveAt(ctx, key, nil, n)
	case verdict.StoreDown:
		w.counts.Add(PathFallback, OutcomeError)
		return Result{ResetAfter: reset}, Receipt{}, fmt.Errorf("%w: the failure mode is fail-closed", apierr.ErrStoreUnavailable)
	}
	return w.local(v, key, now, reset), Receipt{At: now}, nil
}

// Take decides n for key in the store, as Check does.
func (w *strictWindow) Take(ctx context.Context, key string, n int64) (Result, Receipt, error) {
	if !w.healthy.Load() {
		return w.fallbackAt(key, n, syncport.ErrUnavailable)
	}
	return w.urgentAt(ctx, key, n)
}

// Refund takes back an admission of a shared rule: from the key's pending
// count if it was decided here, and what is no longer pending there (the
// store has it: pushed, or covered by a lease) by a negative correction
// pushed to the store, as for an admission the store counted.
func (w *windowRule) Refund(key string, n int64, rc Receipt) {
	if !rc.Store {
		taken, tracked := w.table.Refund(key, rc.At, n)
		if !tracked || taken == n {
			return
		}
		n -= taken
	}
	ref, _ := w.table.Control().Ref(key) // nil without an entry
	w.store.Refund(key, ref, rc.At, n)
}

// Take decides n for key on the clock.
func (g *gcraLocal) Take(_ context.Context, key string, n int64) (Result, Receipt, error) {
	now := g.now()
	return result(g.table.Allow(key, now, n)), Receipt{At: now}, nil
}

// Refund moves the key's TAT back by n intervals.
func (g *gcraLocal) Refund(key string, n int64, _ Receipt) { g.table.Refund(key, n) }

// Take decides n for key on the clock.
func (l *logLocal) Take(_ context.Context, key string, n int64) (Result, Receipt, error) {
	now := l.now()
	return result(l.table.Allow(key, now, n)), Receipt{At: now}, nil
}

// Refund removes the n timestamps the admission added.
func (l *logLocal) Refund(key string, n int64, rc Receipt) { l.table.Refund(key, rc.At, n) }

// Take decides n for key on the clock.
func (w *warmLocal) Take(_ context.Context, key string, n int64) (Result, Receipt, error) {
	now := w.now()
	return result(w.table.Allow(key, now, n)), Receipt{At: now}, nil
}

// Take decides n for key in the store, as Check does.
func (g *gcraStrict) Take(ctx context.Context, key string, n int64) (Result, Receipt, error) {
	r, err := g.Check(ctx, key, n)
	return r, Receipt{Store: true}, err
}

// Take decides n for key in the store, as Check does.
func (l *logStrict) Take(ctx context.Context, key string, n int64) (Result, Receipt, error) {
	r, err := l.Check(ctx, key, n)
	return r, Receipt{Store: true}, err
}
