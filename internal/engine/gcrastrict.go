package engine

import (
	"context"

	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/window"
)

// gcraStrict is a TokenBucket or GCRA rule without a WarmUp, Strict: every
// check is decided by the store, on its clock, with window.GCRA's test
// (syncport.GCRAStore). Its paths: Check → syncport.GCRAStore.Decide → the
// store's answer → window.GCRA's fields; or, when the store does not
// decide, Check → strictKeyed.failed by the failure mode. Every Result
// field is exact on the store's clock: RetryAfter is the first nanosecond
// at which the same cost is admitted if nothing else is, ResetAfter until
// the bucket is full again, Remaining the largest cost admitted now.
type gcraStrict struct {
	strictKeyed
	g     window.GCRA
	store syncport.GCRAStore
}

func newGCRAStrict(cfg Config) (Engine, error) {
	r := cfg.Rule
	s, err := strictStore(cfg)
	if err != nil {
		return nil, err
	}
	g := window.NewGCRA(r.Window, r.Limit, r.Burst)
	t, err := localcache.NewGCRATable(g, cfg.Keys)
	if err != nil {
		return nil, ruleError(r, err)
	}
	e := &gcraStrict{g: g}
	if e.store, err = s.AddGCRA(r.Name, g.Interval(), g.Burst(), g.Burst()); err != nil {
		return nil, ruleError(r, err)
	}
	e.init(cfg, t)
	return e, nil
}

// Check decides n for key in the store.
func (g *gcraStrict) Check(ctx context.Context, key string, n int64) (Result, error) {
	a, err := g.store.Decide(ctx, key, n, false)
	if err != nil {
		return g.failed(key, n, err)
	}
	return g.decided(g.answer(a, n)), nil
}

// answer turns the store's answer into a Result with window.GCRA's math on
// the key's TAT after the decision.
func (g *gcraStrict) answer(a syncport.GCRAAnswer, n int64) Result {
	r := Result{Allowed: a.Admitted, Remaining: g.g.Remaining(a.TAT, a.At), ResetAfter: g.g.ResetAfter(a.TAT, a.At)}
	if !a.Admitted {
		r.RetryAfter = retry(g.g.RetryAfter(a.TAT, a.At, n), r.ResetAfter)
	}
	return r
}

// Peek asks the store what a check of one unit would see, bounded by the
// store's Timeout; if it does not answer, the local view.
func (g *gcraStrict) Peek(key string) Result {
	a, err := g.store.Decide(context.Background(), key, 1, true)
	if err != nil {
		return g.local(key)
	}
	r := g.answer(a, 1)
	r.RetryAfter = 0
	return r
}
