package engine

import (
	"context"

	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/window"
)

// warmLocal is a TokenBucket or GCRA rule with a WarmUp, Local: Guava's
// SmoothWarmingUp decided now (window.WarmUp). Its path: Check →
// localcache.WarmTable.Allow (one map load, one compare-and-swap on the
// packed state): for one unit on a warm, cold or over-the-rate key, integer
// arithmetic on the packed word (window.WarmUnit); otherwise
// window.WarmUp.Check. RetryAfter is exact on the state's µs clock;
// Remaining is the largest cost admitted now.
type warmLocal struct {
	keyClock
	table *localcache.WarmTable
}

func newWarmUp(cfg Config) (Engine, error) {
	r := cfg.Rule
	t, err := localcache.NewWarmTable(window.NewWarmUp(r.Window, r.WarmUp, r.Limit, r.Burst), cfg.Keys)
	if err != nil {
		return nil, ruleError(r, err)
	}
	e := &warmLocal{table: t}
	e.init(cfg)
	return e, nil
}

// Check decides n for key.
func (w *warmLocal) Check(_ context.Context, key string, n int64) (Result, error) {
	return result(w.table.Allow(key, w.time(), n)), nil
}

// Peek returns what a check of one unit would see.
func (w *warmLocal) Peek(key string) Result { return peek(w.table, &w.keyClock, key) }

// Sweep evicts the keys fully cold and without debt at now.
func (w *warmLocal) Sweep(now int64) int { return w.table.Sweep(now) }
