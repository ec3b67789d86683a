package engine

import (
	"context"

	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
)

// logLocal is a SlidingLog rule, Local: the exact sliding log, one
// timestamp per admitted unit. Its path: Check → localcache.LogTable.Allow
// (a map load, then the key's ring under its lock). Every Result field is
// exact: Remaining is Limit less the units in the window, ResetAfter until
// the newest has left it, RetryAfter until enough have left for the same
// cost.
type logLocal struct {
	keyClock
	table *localcache.LogTable
}

func newSlidingLog(cfg Config) (Engine, error) {
	r := cfg.Rule
	if err := supported(r); err != nil {
		return nil, err
	}
	if r.Mode == policy.Strict {
		return newLogStrict(cfg)
	}
	t, err := localcache.NewLogTable(r.Window, r.Limit, cfg.Keys)
	if err != nil {
		return nil, ruleError(r, err)
	}
	e := &logLocal{table: t}
	e.init(cfg)
	return e, nil
}

// Check decides n for key.
func (l *logLocal) Check(_ context.Context, key string, n int64) (Result, error) {
	return result(l.table.Allow(key, l.time(), n)), nil
}

// Peek returns what a check of one unit would see.
func (l *logLocal) Peek(key string) Result { return peek(l.table, &l.keyClock, key) }

// Sweep evicts the keys with nothing left in the window at now.
func (l *logLocal) Sweep(now int64) int { return l.table.Sweep(now) }
