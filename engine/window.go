package engine

import (
	"fmt"
	"math"
	"sync/atomic"
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
	limit  atomic.Int64 // SetLimit changes it in place
	geo    window.Sliding
	table  *localcache.Table
	store  *syncer.Rule // nil for Local
	now    func() int64
	ticked bool

	budget    float64
	mode      policy.FailureMode
	interval  time.Duration
	instances atomic.Int64 // N̂ as last set, for SetLimit
}

func newWindow(cfg Config) (Engine, error) {
	r := cfg.Rule
	// The engine is one of three types that embed windowRule; build it in
	// place (windowRule holds atomics, which must not be copied).
	var (
		e Engine
		w *windowRule
	)
	switch r.Mode {
	case policy.Local:
		lw := &localWindow{}
		e, w = lw, &lw.windowRule
	case policy.Strict:
		sw := &strictWindow{}
		e, w = sw, &sw.windowRule
	default:
		ew := &eventualWindow{}
		e, w = ew, &ew.windowRule
	}
	w.limit.Store(r.Limit)
	w.now, w.ticked = cfg.Now, cfg.Ticked
	w.budget, w.mode, w.interval = cfg.ErrorBudget, cfg.FailureMode, cfg.SyncInterval
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
		return e, nil
	}
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w %q: Mode %v needs a store", policy.ErrInvalidRule, r.Name, r.Mode)
	}
	w.store, err = cfg.Store.AddRule(syncer.RuleConfig{Name: r.Name, Geometry: w.geo, Limit: r.Limit, Keys: t, Leases: r.Mode == policy.Eventual})
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", policy.ErrInvalidRule, r.Name, err)
	}
	w.SetFleet(1, false)
	return e, nil
}

// SetLimit changes the rule's Limit in place: every count stays, the
// cached budgets are dropped, and the next check is decided on the new
// limit (see Retuner).
func (w *windowRule) SetLimit(limit int64) {
	w.limit.Store(limit)
	w.table.SetLimit(limit)
	if w.store != nil {
		w.store.SetLimit(limit)
	}
	lim := w.table.Limits()
	w.SetFleet(w.instances.Load(), lim.Down)
}

// Retire tells the store to push the rule's pending counts once more and
// then forget the rule (see Retirer).
func (w *windowRule) Retire() {
	if w.store != nil {
		w.store.Retire()
	}
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
	w.instances.Store(n)
	limit := w.limit.Load()
	lim := localcache.Limits{
		Cap:   int64(math.Floor(w.budget * float64(limit) / float64(n+1))),
		Share: limit / n,
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
