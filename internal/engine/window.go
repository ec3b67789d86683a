package engine

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// windowRule is what the sliding and fixed window engines share: the rule's
// geometry, its per-key state, and, unless Local, its store. The engines
// (localWindow, eventualWindow, strictWindow) differ only in Check; they
// embed it by value, so that a check reaches the table one load sooner.
type windowRule struct {
	limit atomic.Int64 // SetLimit changes it in place
	geo   window.Sliding
	table *localcache.Table
	store syncport.WindowStore // nil for Local
	// healthy is the syncer's health (store.Health), loaded per Strict
	// check; nil for Local.
	healthy *atomic.Bool
	now     func() int64
	ticked  bool

	budget   float64
	mode     policy.FailureMode
	interval time.Duration
	fleet    *fleetState

	counts *Counts // nil: not counted
	path   Path    // the path of a check the store decides: urgent or strict
}

// fleetState is what SetFleet last applied, and the recovery grace: after an
// outage under FailLocal the table stays Recovering until every live
// instance has heartbeated since this one saw the store again (the
// registry's oldest heartbeat is later than recovered; an instance back
// from an outage heartbeats only once its first cycle has pushed every
// count it holds) and the registry holds the N̂ of the outage's start again
// (expect; or an InstanceTTL has passed: a store that kept its data through
// a long outage comes back with its registry entries expired), then for
// recoveryGrace sync intervals more, counted in Ticks: time for this
// instance's next pull to bring those counts. Its table is Recovering
// throughout, with the shares of expect instances.
type fleetState struct {
	mu        sync.Mutex
	instances int64
	down      bool
	recovered int64        // store time the store was seen again
	expect    int64        // N̂ when the outage began: the instances to wait for
	grace     atomic.Int64 // 0: none; -1: waiting for the fleet; > 0: ticks left
}

// recoveryGrace, in sync intervals, is how long a FailLocal rule stays
// Recovering once every live instance has heartbeated since the store came
// back: an instance back from an outage heartbeats only at the end of its
// first cycle back, once it has pushed its outage counts (syncer.cycle), and
// this instance's next cycle pulls what it pushed.
const recoveryGrace = 2

// tickEvery is the limiter's Tick period, which the grace is counted in.
const tickEvery = time.Millisecond

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
	w.fleet = &fleetState{}
	w.counts, w.path = cfg.Counts, PathUrgent
	if r.Mode == policy.Strict {
		w.path = PathStrict
	}
	w.now, w.ticked = cfg.Now, cfg.Ticked
	w.budget, w.mode, w.interval = cfg.ErrorBudget, cfg.FailureMode, cfg.SyncInterval
	w.geo = WindowGeometry(r)
	shared := r.Mode != policy.Local
	lc := localcache.Config{Geometry: w.geo, Limit: r.Limit, Eventual: shared, ByNeed: r.Mode == policy.Eventual, Keys: cfg.Keys}
	if w.ticked {
		lc.Now = w.now // checks on the published time catch up with a late ticker
	}
	t, err := localcache.New(lc)
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
	w.store, err = cfg.Store.AddRule(syncport.RuleConfig{Name: r.Name, Geometry: w.geo, Limit: r.Limit, Keys: t.SyncKeys(), Leases: r.Mode == policy.Eventual})
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", policy.ErrInvalidRule, r.Name, err)
	}
	w.healthy = w.store.Health()
	w.SetFleet(1, false)
	return e, nil
}

// SetLimit changes the rule's Limit in place: every count stays, the
// cached budgets are dropped, and the next check is decided on the new
// limit (see Retuner).
func (w *windowRule) SetLimit(limit int64) {
	w.limit.Store(limit)
	w.table.Control().SetLimit(limit)
	if w.store != nil {
		w.store.SetLimit(limit)
	}
	w.fleet.mu.Lock()
	w.applyFleet()
	w.fleet.mu.Unlock()
}

// Retire tells the store to push the rule's pending counts once more and
// then forget the rule (see Retirer).
func (w *windowRule) Retire() {
	if w.store != nil {
		w.store.Retire()
	}
}

// WindowGeometry returns the counting geometry of a validated sliding,
// weighted or fixed window rule; for a calendar quota, a fixed window per
// period of its calendar.
func WindowGeometry(r policy.Rule) window.Sliding {
	if rulegeo.Calendar(r) {
		loc, err := rulegeo.Location(r)
		if err != nil {
			loc = time.UTC // Validate refused it: unreachable for a validated rule
		}
		return window.NewCalendar(r.Period, loc)
	}
	switch r.Algorithm {
	case policy.FixedWindow:
		return window.NewFixed(r.Window)
	case policy.WeightedWindow:
		return window.NewWeighted(r.Window, rulegeo.Buckets(r))
	}
	return window.NewSliding(r.Window, rulegeo.Buckets(r))
}

// Tick publishes now for checks on the published time, and ends the
// recovery grace once it has run out.
func (w *windowRule) Tick(now int64) {
	w.table.Control().Tick(now)
	if w.fleet.grace.Load() != 0 {
		w.tickGrace()
	}
}

// tickGrace advances the recovery grace by one Tick.
func (w *windowRule) tickGrace() {
	f := w.fleet
	f.mu.Lock()
	defer f.mu.Unlock()
	switch g := f.grace.Load(); {
	case g < 0:
		// Every instance the registry holds has heartbeated since, and it
		// holds as many as before the outage, or the instances missing have
		// stayed silent for an InstanceTTL since the store came back: they
		// would have left the registry anyway.
		all := f.instances >= f.expect || w.now()-f.recovered > int64(w.store.InstanceTTL())
		if all && w.store.OldestHeartbeat() > f.recovered {
			f.grace.Store(max(int64(recoveryGrace*w.interval/tickEvery), 1))
		}
	case g == 1:
		f.grace.Store(0)
		w.applyFleet()
	case g > 1:
		f.grace.Store(g - 1)
	}
}

// Sweep evicts the keys idle at now.
func (w *windowRule) Sweep(now int64) int { return w.table.Sweep(now) }

// SetFleet splits the error budget among instances+1 (the divergence cap
// ⌊ε·L/(N̂+1)⌋ per instance) and sets each instance's share L/N̂ for the
// failure mode. A Local rule's table ignores them. While the store says the
// instance is joining (syncport.WindowStore.Joining: some instance may not count it
// in its N̂ yet), the cap is 0: every admission is counted in the store
// before it is made (a reservation or a lease), so the others' caps, sized
// on a fleet without this instance, keep the bound.
//
// Back from an outage under FailLocal, an Eventual table is Recovering
// (tableport.Limits.Recovering) until the fleet has pushed its outage
// counts (fleetState): an instance that sees the store first must not have
// it admit checks before the others' outage counts have reached it.
func (w *windowRule) SetFleet(instances int64, down bool) {
	f := w.fleet
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case down:
		if !f.down && f.grace.Load() == 0 {
			// A new outage, not a relapse during a recovery: N̂ as it
			// began. What the registry says while the store is marked down
			// (a look that found it emptied) must not lower it.
			f.expect = f.instances
		}
		f.grace.Store(0)
	case f.down && w.mode == policy.FailLocal && w.store != nil:
		f.recovered = w.now()
		f.grace.Store(-1)
	}
	f.instances, f.down = max(instances, 1), down
	w.applyFleet()
}

// applyFleet sets the table's limits from the fleet state; the caller holds
// w.fleet.mu.
func (w *windowRule) applyFleet() {
	f := w.fleet
	n := max(f.instances, 1) // 0 until the first SetFleet (never, for a Local rule)
	recovering := !f.down && f.grace.Load() != 0
	if recovering {
		// A registry that lost its expired entries in a long outage counts
		// only the instances back so far: the shares stay those of the
		// fleet that admitted during the outage.
		n = max(n, f.expect)
	}
	limit := w.limit.Load()
	capv := int64(math.Floor(w.budget * float64(limit) / float64(n+1)))
	if w.store != nil && w.store.Joining() {
		capv = 0
	}
	lim := tableport.Limits{
		Cap:        capv,
		Share:      limit / n,
		Down:       f.down,
		Mode:       w.mode,
		Recovering: recovering,
	}
	if w.table.Control().Limits() != lim {
		w.table.Control().SetLimits(lim)
	}
}

// Peek returns what a check of one unit would see, counting nothing.
func (w *windowRule) Peek(key string) Result {
	now := w.now()
	rem, reset := w.table.Control().RoomReset(key, now)
	rem = max(rem, 0)
	return Result{Allowed: rem >= 1, Remaining: rem, ResetAfter: reset}
}

// clock returns the time a check is decided at, and its ResetAfter.
func (w *windowRule) clock() (int64, time.Duration) {
	now := w.now()
	return now, w.geo.ResetAfter(now)
}

// local turns the per-key state's verdict for key at now into a Result,
// for the statuses decided without the store. An admission's ResetAfter is
// reset, the geometry's for now: the admission is in the current bucket. A
// denial's is the key's own (denied).
func (w *windowRule) local(v verdict.Verdict, key string, now int64, reset time.Duration) Result {
	if v.Status == verdict.Allowed {
		return Result{Allowed: true, Remaining: v.Remaining, ResetAfter: reset}
	}
	return w.denied(v, key, now)
}

// denied is the Result of a denial of key at now: ResetAfter until the
// newest bucket holding a count of the key leaves the window
// (localcache.Table.ResetAt), which a denial does not move, and never
// before RetryAfter.
func (w *windowRule) denied(v verdict.Verdict, key string, now int64) Result {
	reset := v.Reset // computed on the entry, if the table had it in hand
	if reset <= 0 {
		reset = w.table.ResetAt(key, now)
	}
	ra := retry(v.RetryAfter, reset)
	return Result{Remaining: v.Remaining, ResetAfter: max(reset, ra), RetryAfter: ra}
}

// retry turns "never" (-1) into the reset time, the best hint there is.
func retry(ra, reset time.Duration) time.Duration {
	if ra < 0 {
		return reset
	}
	return ra
}
