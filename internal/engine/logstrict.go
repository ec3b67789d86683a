package engine

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/localcache"
)

// logStrict is a SlidingLog rule, Strict: every check is decided by the
// store on its clock, on the key's log kept there (syncport.LogStore). Its
// paths: Check → syncport.LogStore.Decide → the store's answer; or, when the
// store does not decide, Check → strictKeyed.failed by the failure mode.
// Every Result field is exact on the store's µs clock, as logLocal's:
// Remaining is Limit less the units in the window, ResetAfter until the
// newest has left it, RetryAfter until enough have left for the same cost.
type logStrict struct {
	strictKeyed
	limit  int64
	window int64
	store  syncport.LogStore
}

func newLogStrict(cfg Config) (Engine, error) {
	r := cfg.Rule
	s, err := strictStore(cfg)
	if err != nil {
		return nil, err
	}
	t, err := localcache.NewLogTable(r.Window, r.Limit, cfg.Keys)
	if err != nil {
		return nil, ruleError(r, err)
	}
	e := &logStrict{limit: r.Limit, window: int64(r.Window)}
	if e.store, err = s.AddLog(r.Name, r.Window, r.Limit); err != nil {
		return nil, ruleError(r, err)
	}
	e.init(cfg, t)
	return e, nil
}

// Check decides n for key in the store.
func (l *logStrict) Check(ctx context.Context, key string, n int64) (Result, error) {
	a, err := l.store.Decide(ctx, key, n, false)
	if err != nil {
		return l.failed(key, n, err)
	}
	return l.decided(l.answer(a)), nil
}

// answer turns the store's answer into a Result.
func (l *logStrict) answer(a syncport.LogAnswer) Result {
	r := Result{Allowed: a.Admitted, Remaining: l.limit - a.Count}
	if a.Newest >= 0 && a.Count > 0 {
		r.ResetAfter = time.Duration(a.Newest + l.window - a.At)
	}
	if !a.Admitted {
		r.RetryAfter = r.ResetAfter
		if a.Retry >= 0 {
			r.RetryAfter = time.Duration(a.Retry + l.window - a.At)
		}
	}
	return r
}

// Peek asks the store what a check of one unit would see, bounded by the
// store's Timeout; if it does not answer, the local view.
func (l *logStrict) Peek(key string) Result {
	a, err := l.store.Decide(context.Background(), key, 1, true)
	if err != nil {
		return l.local(key)
	}
	r := l.answer(a)
	r.RetryAfter = 0
	return r
}
