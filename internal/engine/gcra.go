package engine

import (
	"context"

	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// gcraLocal is a TokenBucket or GCRA rule without a WarmUp, Local: decided
// in this process on the key's theoretical arrival time. Its path: Check →
// localcache.GCRATable.Allow (one map load, one compare-and-swap) →
// window.GCRA. TokenBucket shares it: the two algorithms admit the same
// costs (package window proves it), and GCRA's one-word state is the
// cheaper to keep. Every Result field is exact: Remaining the largest cost
// admitted now, ResetAfter until the bucket is full, RetryAfter the first
// nanosecond at which the same cost is admitted if nothing else is.
type gcraLocal struct {
	keyClock
	table *localcache.GCRATable
}

func newGCRA(cfg Config) (Engine, error) {
	r := cfg.Rule
	if err := supported(r); err != nil {
		return nil, err
	}
	if r.WarmUp > 0 {
		return newWarmUp(cfg)
	}
	switch r.Mode {
	case policy.Strict:
		return newGCRAStrict(cfg)
	case policy.Eventual:
		return newGCRAEventual(cfg)
	}
	t, err := localcache.NewGCRATable(window.NewGCRA(r.Window, r.Limit, r.Burst), cfg.Keys)
	if err != nil {
		return nil, ruleError(r, err)
	}
	e := &gcraLocal{table: t}
	e.init(cfg)
	return e, nil
}

// Check decides n for key.
func (g *gcraLocal) Check(_ context.Context, key string, n int64) (Result, error) {
	return result(g.table.Allow(key, g.time(), n)), nil
}

// Peek returns what a check of one unit would see.
func (g *gcraLocal) Peek(key string) Result { return peek(g.table, &g.keyClock, key) }

// Sweep evicts the keys whose bucket is full at now.
func (g *gcraLocal) Sweep(now int64) int { return g.table.Sweep(now) }
