package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/syncer"
	"github.com/sluicehq/sluice/window"
)

// windowRule is what the sliding and fixed window engines share: the rule's
// geometry, its per-key state, and, unless Local, its store. The engines
// (localWindow, eventualWindow, strictWindow) differ only in Check; they
// embed it by value, so that a check reaches the table one load sooner.
type windowRule struct {
	limit  int64
	geo    window.Sliding
	table  *localcache.Table
	store  *syncer.Rule // nil for Local
	now    func() int64
	ticked bool

	budget   float64
	mode     policy.FailureMode
	interval time.Duration

	counts *Counts // nil: not counted
	path   Path    // the path of a check the store decides: urgent or strict
}

func newWindow(cfg Config) (Engine, error) {
	r := cfg.Rule
	w := &windowRule{
		limit:    r.Limit,
		now:      cfg.Now,
		ticked:   cfg.Ticked,
		budget:   cfg.ErrorBudget,
		mode:     cfg.FailureMode,
		interval: cfg.SyncInterval,
		counts:   cfg.Counts,
		path:     PathUrgent,
	}
	if r.Mode == policy.Strict {
		w.path = PathStrict
	}
	if r.Algorithm == policy.FixedWindow {
		w.geo = window.NewFixed(r.Window)
	} else {
		w.geo = window.NewSliding(r.Window, r.Buckets())
	}
	shared := r.Mode != policy.Local
	t, err := localcache.New(localcache.Config{Geometry: w.geo, Limit: r.Limit, Eventual: shared, Keys: cfg.Keys})
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", policy.ErrInvalidRule, r.Name, err)
	}
	w.table = t
	if !shared {
		return &localWindow{*w}, nil
	}
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w %q: Mode %v needs a store", policy.ErrInvalidRule, r.Name, r.Mode)
	}
	w.store, err = cfg.Store.AddRule(syncer.RuleConfig{Name: r.Name, Geometry: w.geo, Limit: r.Limit, Keys: t, Leases: r.Mode == policy.Eventual})
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", policy.ErrInvalidRule, r.Name, err)
	}
	w.SetFleet(1, false)
	if r.Mode == policy.Strict {
		return &strictWindow{*w}, nil
	}
	return &eventualWindow{*w}, nil
}

// WindowGeometry returns the counting geometry of a validated sliding,
// weighted or fixed window rule.
func WindowGeometry(r policy.Rule) window.Sliding {
	switch r.Algorithm {
	case policy.FixedWindow:
		return window.NewFixed(r.Window)
	case policy.WeightedWindow:
		return window.NewWeighted(r.Window, r.Buckets())
	}
	return window.NewSliding(r.Window, r.Buckets())
}

// Tick publishes now for checks on the published time.
func (w *windowRule) Tick(now int64) { w.table.Tick(now) }

// Sweep evicts the keys idle at now.
func (w *windowRule) Sweep(now int64) int { return w.table.Sweep(now) }

// SetFleet splits the error budget among instances+1 (the divergence cap
// ⌊ε·L/(N̂+1)⌋ per instance) and sets each instance's share L/N̂ for the
// failure mode. A Local rule's table ignores them.
func (w *windowRule) SetFleet(instances int64, down bool) {
	n := max(instances, 1)
	lim := localcache.Limits{
		Cap:   int64(math.Floor(w.budget * float64(w.limit) / float64(n+1))),
		Share: w.limit / n,
		Down:  down,
		Mode:  w.mode,
	}
	if w.table.Limits() != lim {
		w.table.SetLimits(lim)
	}
}

// Peek returns what a check of one unit would see, counting nothing.
func (w *windowRule) Peek(key string) Result {
	now := w.now()
	rem := max(w.table.Room(key, now), 0)
	return Result{Allowed: rem >= 1, Remaining: rem, ResetAfter: w.geo.ResetAfter(now)}
}

// clock returns the time a check is decided at, and its ResetAfter.
func (w *windowRule) clock() (int64, time.Duration) {
	now := w.now()
	return now, w.geo.ResetAfter(now)
}

// local turns the per-key state's verdict into a Result, for the statuses
// decided without the store.
func (w *windowRule) local(v localcache.Verdict, reset time.Duration) Result {
	if v.Status == localcache.Allowed {
		return Result{Allowed: true, Remaining: v.Remaining, ResetAfter: reset}
	}
	return Result{Remaining: v.Remaining, ResetAfter: reset, RetryAfter: retry(v.RetryAfter, reset)}
}

// retry turns "never" (-1) into the reset time, the best hint there is.
func retry(ra, reset time.Duration) time.Duration {
	if ra < 0 {
		return reset
	}
	return ra
}
