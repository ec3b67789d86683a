package sluice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/rawmem"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/syncer"
)

// preciseBelow: rules whose sub-window is shorter read the clock on every
// check instead of the time published every tickEvery.
const (
	preciseBelow = 10 * time.Millisecond
	maxFastRules = 8
)

// Limiter decides checks for a set of rules. It is safe for concurrent use.
//
// The Limiter only wires: it validates a check's arguments, finds the rule's
// engine and hands the check to it (package engine owns the decision). In
// the background it publishes the time to the engines, sweeps idle keys, and
// passes the syncer's view of the fleet (N̂, the store's health) on to them.
type Limiter struct {
	opts  Options
	set   atomic.Pointer[ruleSet] // the rules; SetRules replaces it whole
	setMu sync.Mutex              // serializes SetRules
	keys  *localcache.Keys
	sync  *syncer.Syncer // nil without a store or without shared rules
	tel   *telemetry
	clock Clock     // nil: system clock
	base  time.Time // system clock origin
	baseN int64     // base as Unix ns

	nhat     atomic.Int64
	degraded atomic.Bool
	// storeState is the store's state as last logged (stateOf; fleetMu).
	storeState int
	closed     atomic.Bool
	stop       chan struct{}
	wg         sync.WaitGroup
	fleetMu    sync.Mutex

	waitMu  sync.Mutex             // guards queues (wait.go)
	queues  map[waitKey]*waitQueue // Wait's queues, by rule and key
	waiters atomic.Int64           // callers queued in Wait, across keys

	uses map[string]map[string]int // rule name → user → holds (Require); under setMu

	inf *inflight // the InFlight rules and their slots (inflight.go)
}

// rule is one rule of the limiter: its name, limit and engine, and the
// rules of its overrides' keys.
type rule struct {
	name    string
	limit   int64
	maxCost int64 // policy.Rule.MaxCost: Burst for the buckets, else limit
	window  time.Duration
	eng     engine.Engine
	extra   int64 // the soft band: what the engine admits past limit (policy.Rule.Soft)
	shadow  bool  // policy.Rule.Shadow: never deny
	// refunder is eng as an engine.Refunder, nil if its admissions cannot
	// be taken back (AllowAll then checks the rule last).
	refunder engine.Refunder
	// capacity is the meter of an elastic rule's capacity rule
	// (policy.Rule.Ceiling; elastic.go), nil for the others.
	capacity *rule
	capLimit int64            // the capacity rule's Limit
	capRetry time.Duration    // RetryAfter of a denial at the capacity: its sub-window
	over     map[string]*rule // key → its override tier's rule; nil without overrides
	pr       policy.Rule      // as resolved (for a tier: policy.Rule.Tier's)
	counts   *engine.Counts   // nil: checks not counted (no-op MeterProvider)
}

// New returns a Limiter for rules. It validates everything first and returns
// an error that says what is wrong and how to fix it. With a store it checks
// the store once, bounded by max(Timeout, 1s): it registers the instance in
// the registry (a script call on a key under Prefix), sends what the syncer
// sends outside its scripts, and loads the scripts. A store that refuses this client (wrong or missing credentials, an
// ACL user without the commands or the keys, scripting disabled) is an error
// wrapping ErrStoreConfig, which says what to change. If the store cannot be
// reached, or refuses writes, New still returns a working Limiter, on its
// failure mode, that keeps trying — unless Options.RequireStore is set: then
// it returns an error wrapping ErrStoreUnavailable.
//
// When other instances are live and SyncInterval is at most a third of a
// second, New then waits until the fleet counts the new one (it is no
// longer joining: every other instance has synced twice since it
// registered), at most 3·SyncInterval + Timeout: while an instance is
// joining each key's first check waits for the store. The wait is one to
// two sync intervals; if the registry holds an instance that died without
// closing, New returns at the bound and the new instance decides on the
// store until that entry expires.
func New(opts Options, rules ...policy.Rule) (*Limiter, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: no rules: pass at least one policy.Rule", ErrInvalidOptions)
	}
	rules, inRules, inFleet, err := splitInFlight(rules, opts.Redis != nil)
	if err != nil {
		return nil, err
	}
	resolved, shared, err := resolveRules(rules, opts.Redis != nil)
	if err != nil {
		return nil, err
	}
	shared = shared || inFleet
	l := &Limiter{
		opts:  opts,
		keys:  localcache.NewKeys(int64(opts.MaxKeys)),
		clock: opts.Clock,
		stop:  make(chan struct{}),
	}
	l.tel = newTelemetry(&l.opts)
	l.inf = newInflight(l, inRules)
	l.base = time.Now()
	l.baseN = l.base.UnixNano()
	l.nhat.Store(int64(max(opts.MinInstances, 1)))
	if shared {
		cfg := syncer.Config{
			Client:     opts.Redis,
			Prefix:     opts.Prefix,
			InstanceID: opts.InstanceID,
			Interval:   opts.SyncInterval,
			Timeout:    opts.Timeout,
			Batch:      opts.BatchSize,
			Observer:   l.tel,
		}
		if opts.Clock != nil {
			cfg.Clock = opts.Clock
		}
		if l.sync, err = syncer.New(cfg); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
		}
	}
	set := newRuleSet(len(resolved))
	for _, pr := range resolved {
		r, err := l.buildRule(pr, nil, &build{kept: map[engine.Engine]bool{}})
		if err != nil {
			return nil, err
		}
		set.add(r)
	}
	if err := l.linkCapacity(set, resolved, nil, &build{kept: map[engine.Engine]bool{}}); err != nil {
		return nil, err
	}
	l.set.Store(set)
	if l.sync != nil {
		ctx, cancel := context.WithTimeout(context.Background(), max(opts.Timeout, time.Second))
		err := l.sync.Check(ctx)
		if err != nil && (errors.Is(err, ErrStoreConfig) || opts.RequireStore) {
			_ = l.sync.Close(ctx)
			cancel()
			if errors.Is(err, ErrStoreConfig) {
				return nil, err // it names the fix
			}
			return nil, fmt.Errorf("%w: at start (Options.RequireStore): %w", ErrStoreUnavailable, err)
		}
		cancel()
	}
	l.tick()
	l.tel.start(l)
	if l.sync != nil {
		_ = l.sync.Start(context.Background()) // after Check: no round trip; a failure is in the fleet view, the rules start on their failure mode
		l.awaitJoined()
		l.tick() // the time published before the wait is stale: checks would count in its bucket
		l.applyFleet()
	}
	l.wg.Add(1)
	go l.background()
	l.inf.startRenewal()
	return l, nil
}

// resolveRules validates rules, refuses duplicate names, and resolves each
// rule's ModeDefault: Eventual with a store, Local without. shared reports
// whether a rule needs the store.
func resolveRules(rules []policy.Rule, store bool) (out []policy.Rule, shared bool, err error) {
	seen := make(map[string]bool, len(rules))
	for _, pr := range rules {
		if err := pr.Validate(); err != nil {
			return nil, false, err
		}
		if seen[pr.Name] {
			return nil, false, fmt.Errorf("%w %q: duplicate rule name: every rule needs a unique name", policy.ErrInvalidRule, pr.Name)
		}
		seen[pr.Name] = true
		if pr.Deny {
			pr.Mode = policy.Local // denies without counting: nothing to share
		}
		if pr.Mode == policy.ModeDefault {
			pr.Mode = policy.Local
			if store {
				pr.Mode = policy.Eventual
				if eventualAlgorithm(pr) {
					// What Validate checks of an explicit Eventual rule: a
					// bucket's capacity the store computes exactly.
					if err := pr.Validate(); err != nil {
						return nil, false, err
					}
				}
			}
		}
		if pr.Mode != policy.Local && !store {
			return nil, false, fmt.Errorf("%w %q: Mode %v needs a store: set Options.Redis, or use policy.Local", policy.ErrInvalidRule, pr.Name, pr.Mode)
		}
		if !eventualAlgorithm(pr) && pr.Mode == policy.Eventual {
			// Only a ModeDefault gets here: Validate refuses an explicit
			// Eventual for these rules, with the reason.
			if pr.WarmUp > 0 {
				return nil, false, fmt.Errorf("%w %q: a %v with a WarmUp has no Mode Eventual, the default with a store (a warm-up is decided in this process only): set Mode: policy.Local", policy.ErrInvalidRule, pr.Name, pr.Algorithm)
			}
			return nil, false, fmt.Errorf("%w %q: a %v has no Mode Eventual, the default with a store: set Mode: policy.Strict to share it across the fleet (one store call per check), or policy.Local", policy.ErrInvalidRule, pr.Name, pr.Algorithm)
		}
		shared = shared || pr.Mode != policy.Local
		out = append(out, pr)
	}
	return out, shared, nil
}

// eventualAlgorithm reports whether a rule has the Eventual mode: the
// windows, and a TokenBucket or GCRA without a WarmUp.
func eventualAlgorithm(pr policy.Rule) bool {
	return windowAlgorithm(pr.Algorithm) || (pr.Algorithm == policy.TokenBucket || pr.Algorithm == policy.GCRA) && pr.WarmUp == 0
}

// windowAlgorithm reports whether an algorithm counts in sub-windows (the
// sliding, weighted and fixed windows) and so has the Eventual mode.
// The buckets have it too, through eventualAlgorithm.
func windowAlgorithm(a policy.Algorithm) bool {
	return a == policy.SlidingWindow || a == policy.WeightedWindow || a == policy.FixedWindow
}

// resolution is the shortest time that changes a rule's decisions: its
// sub-window for the windows, the emission interval for the buckets, the
// mean spacing Window/Limit for the log. Rules whose resolution is under
// preciseBelow read the clock on every check: the published time is up to a
// tick old, which delays a decision by at most a tick, a tenth of the
// resolution or less.
func resolution(pr policy.Rule) time.Duration {
	if windowAlgorithm(pr.Algorithm) {
		return rulegeo.SubWindow(pr)
	}
	return pr.Interval()
}

// newEngine builds a validated rule's engine.
func (l *Limiter) newEngine(pr policy.Rule) (engine.Engine, error) {
	eff := pr.Effective() // the engine counts the soft band in
	cfg := engine.Config{
		Rule:         eff,
		Keys:         l.keys,
		Now:          l.now,
		Ticked:       l.clock == nil && resolution(pr) >= preciseBelow && pr.Mode != policy.Strict,
		ErrorBudget:  l.opts.ErrorBudget,
		FailureMode:  l.opts.FailureMode,
		SyncInterval: l.opts.SyncInterval,
		Counts:       l.tel.addRule(pr.Name),
	}
	if pr.Mode != policy.Local {
		cfg.Store = l.sync.Rules()
	}
	return engine.New(cfg)
}

// rule returns the rule named name, or nil.
func (l *Limiter) rule(name string) *rule {
	s := l.set.Load()
	// Callers usually pass the string constant the rule was configured
	// with: the same bytes at the same address are the same name, without
	// the call a byte comparison makes (1.5–4 ns of a 35–60 ns check,
	// benchmarks/HISTORY.md).
	for _, r := range s.fast {
		if rawmem.Same(r.name, name) {
			return r
		}
	}
	for _, r := range s.fast {
		if r.name == name {
			return r
		}
	}
	return s.byName[name]
}

// Allow checks one request for key under the named rule. See AllowN.
func (l *Limiter) Allow(ctx context.Context, rule, key string) (Decision, error) {
	return l.AllowN(ctx, rule, key, 1)
}

// AllowN checks a request of cost n for key under the named rule, and counts
// it if admitted. A denial is a Decision with Allowed false and a nil error.
// The error is non-nil only when the check could not be made: an unknown
// rule, a cost below 1 or above the rule's Limit (its Burst, for a
// TokenBucket or GCRA: a cost it could never admit), a key longer than
// Options.MaxKeyLength, a closed limiter, or a store failure under
// [policy.FailClosed] (the Decision is then a denial).
//
// Within this instance's share of the error budget a check is local: one map
// lookup and one compare-and-swap, no allocation, no lock, no I/O. A check that
// would take the instance past its share is decided by the store, batched
// with the key's pending counts, and waits at most Options.Timeout or ctx's
// deadline. Strict rules always ask the store. A nil ctx is
// context.Background.
func (l *Limiter) AllowN(ctx context.Context, rule, key string, n int64) (d Decision, err error) {
	r := l.rule(rule)
	if r != nil && r.over != nil {
		r = r.tier(key)
	}
	if r == nil || n < 1 || n > r.maxCost || len(key) > l.opts.MaxKeyLength || l.closed.Load() {
		return l.reject(r, rule, key, n)
	}
	if r.capacity != nil {
		return l.allowElastic(ctx, r, key, n)
	}
	res, err := r.eng.Check(ctx, key, n)
	// Field by field into the named result, not a struct literal: the
	// compiler builds a five-field literal in a temporary and copies it with
	// 16-byte moves that the 8-byte loads of the return then wait on (two
	// store-forwarding stalls, about 6 ns on the hot path).
	d.Allowed = res.Allowed
	d.Limit = r.limit
	d.Remaining = res.Remaining
	d.ResetAfter = res.ResetAfter
	d.RetryAfter = res.RetryAfter
	if r.extra|boolInt(r.shadow) != 0 {
		r.count(d, err)
		return r.shape(d, err)
	}
	r.counts.Check(engine.OutcomeOf(res.Allowed, err))
	return d, err
}

// reject explains why a check could not be made.
func (l *Limiter) reject(r *rule, name, key string, n int64) (Decision, error) {
	if r != nil {
		r.counts.Check(engine.OutcomeError)
	}
	switch {
	case r == nil:
		return Decision{}, fmt.Errorf("%w %q", ErrUnknownRule, name)
	case (n < 1 || n > r.maxCost) && r.maxCost != r.limit:
		return Decision{Limit: r.limit}, fmt.Errorf("%w: cost %d for rule %q: it must be between 1 and the rule's Burst %d", ErrInvalidCost, n, name, r.maxCost)
	case n < 1 || n > r.maxCost:
		return Decision{Limit: r.limit}, fmt.Errorf("%w: cost %d for rule %q: it must be between 1 and the rule's Limit %d", ErrInvalidCost, n, name, r.limit)
	case len(key) > l.opts.MaxKeyLength:
		return Decision{Limit: r.limit}, fmt.Errorf("%w: %d bytes, the maximum is %d", ErrKeyTooLong, len(key), l.opts.MaxKeyLength)
	}
	return Decision{Limit: r.limit}, ErrClosed
}

// Peek returns what Allow would see for key under the named rule, without
// counting anything: Allowed reports whether one more unit fits the window as
// this instance sees it, Remaining what is left. A key this instance does not
// track has its full Limit remaining, less, under a Local rule, what the
// rule's sketch of untracked keys counts for it.
func (l *Limiter) Peek(rule, key string) (Decision, error) {
	r := l.rule(rule)
	if r == nil {
		return Decision{}, fmt.Errorf("%w %q", ErrUnknownRule, rule)
	}
	if r.over != nil {
		r = r.tier(key)
	}
	if l.closed.Load() {
		return Decision{Limit: r.limit}, ErrClosed
	}
	d, _ := r.shape(decision(r.eng.Peek(key), r.limit), nil)
	return d, nil
}

// Flush pushes every pending count and pulls every touched key's totals now,
// and waits for it (bounded by ctx; a nil ctx is context.Background): it
// syncs until nothing is left for the store, at most three cycles. It ends
// every lease the instance holds, giving back the units it did not use, so
// that when it returns the store counts what this instance admitted. The
// syncer goes on after it: a key busy in the window may be leased units
// again (ahead of the next bucket, or by an early sync), which the store
// counts at once; after Close nothing is leased again. Without a store it
// does nothing.
func (l *Limiter) Flush(ctx context.Context) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if l.sync == nil {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	err := l.sync.Flush(ctx)
	l.applyFleet() // what the flush learned binds the checks after it
	if err != nil {
		if errors.Is(err, syncport.ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("sluice: flush: %w", err)
	}
	return nil
}

// Close flushes pending counts to the store, stops the background work and
// leaves the registry. Later checks return ErrClosed. Close is idempotent and
// safe to call concurrently with checks: a check that starts after Close
// returns ErrClosed, one already under way completes (if it is decided
// locally after the final flush, its count never reaches the store). The final
// flush gets max(10·Timeout, 5s); then the round trip in flight is abandoned,
// so Close returns within that plus one client read timeout even if the store
// hangs.
func (l *Limiter) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	l.inf.shut()
	close(l.stop)
	l.wg.Wait()
	defer l.tel.close()
	if l.sync == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(10*l.opts.Timeout, 5*time.Second))
	defer cancel()
	if err := l.sync.Close(ctx); err != nil {
		return fmt.Errorf("sluice: close: %w", err)
	}
	return nil
}
