package sluice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/syncer"
	"github.com/sluicehq/sluice/window"
)

// tickEvery is how often the published time advances; rules whose sub-window
// is shorter than preciseBelow read the clock on every check instead.
const (
	tickEvery    = time.Millisecond
	preciseBelow = 10 * time.Millisecond
	maxFastRules = 8
)

// Limiter decides checks for a set of rules. It is safe for concurrent use.
type Limiter struct {
	opts  Options
	fast  []*rule // the first maxFastRules rules, scanned before the map
	rules map[string]*rule
	keys  *localcache.Keys
	sync  *syncer.Syncer // nil without a store or without shared rules
	clock Clock          // nil: system clock
	base  time.Time      // system clock origin
	baseN int64          // base as Unix ns

	nhat     atomic.Int64
	degraded atomic.Bool
	closed   atomic.Bool
	stop     chan struct{}
	wg       sync.WaitGroup
	limitsMu sync.Mutex
}

type rule struct {
	policy.Rule
	mode    policy.Mode // resolved: Eventual, Local or Strict
	geo     window.Sliding
	table   *localcache.Table
	precise bool // read the clock on each check
	ticked  bool // decided on the table's published time (no clock read)
}

// New returns a Limiter for rules. It validates everything first and returns
// an error that says what is wrong and how to fix it. With a store it
// registers the instance in the registry (bounded by Timeout and the store
// round trip) and starts the background syncer; if the store cannot be
// reached it still returns a working Limiter, on its failure mode, that keeps
// trying.
func New(opts Options, rules ...policy.Rule) (*Limiter, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: no rules: pass at least one policy.Rule", ErrInvalidOptions)
	}
	l := &Limiter{
		opts:  opts,
		rules: make(map[string]*rule, len(rules)),
		keys:  localcache.NewKeys(int64(opts.MaxKeys)),
		clock: opts.Clock,
		stop:  make(chan struct{}),
	}
	l.base = time.Now()
	l.baseN = l.base.UnixNano()
	l.nhat.Store(int64(max(opts.MinInstances, 1)))
	var shared []*syncer.Rule
	for i := range rules {
		r, err := l.addRule(rules[i])
		if err != nil {
			return nil, err
		}
		if r.mode != policy.Local {
			shared = append(shared, &syncer.Rule{Name: r.Name, Table: r.table, Geometry: r.geo, Limit: r.Limit})
		}
	}
	if len(shared) > 0 {
		s, err := syncer.New(syncer.Config{
			Client:      opts.Redis,
			Prefix:      opts.Prefix,
			InstanceID:  opts.InstanceID,
			Interval:    opts.SyncInterval,
			Timeout:     opts.Timeout,
			Batch:       opts.BatchSize,
			LocalNow:    l.localNow,
			OnInstances: l.setInstances,
			OnHealth:    l.setHealth,
		}, shared)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
		}
		l.sync = s
	}
	l.setLimits()
	l.tick()
	if l.sync != nil {
		ctx, cancel := context.WithTimeout(context.Background(), max(opts.Timeout, time.Second))
		err := l.sync.Start(ctx)
		cancel()
		if err != nil {
			l.setHealth(false, err)
		}
	}
	l.wg.Add(1)
	go l.background()
	return l, nil
}

func (o *Options) fill() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if len(o.Prefix) > 64 || strings.ContainsFunc(o.Prefix, func(c rune) bool { return !prefixRune(c) }) {
		return bad("Prefix %q: use 1 to 64 letters, digits, '_', '.', '-' or ':' (braces, spaces and other bytes would break the Redis key layout)", o.Prefix)
	}
	switch {
	case o.SyncInterval == 0:
		o.SyncInterval = DefaultSyncInterval
	case o.SyncInterval < time.Millisecond:
		return bad("SyncInterval %v: it must be at least 1ms (0 means %v)", o.SyncInterval, DefaultSyncInterval)
	}
	switch {
	case o.ErrorBudget == 0:
		o.ErrorBudget = DefaultErrorBudget
	case math.IsNaN(o.ErrorBudget) || o.ErrorBudget < 0 || o.ErrorBudget > 1:
		return bad("ErrorBudget %v: it must be in (0, 1], a fraction of each rule's Limit (0 means %v)", o.ErrorBudget, DefaultErrorBudget)
	}
	if o.InstanceID == "" {
		o.InstanceID = defaultInstanceID()
	} else if err := policy.ValidateName(o.InstanceID); err != nil {
		return bad("InstanceID %q: use 1 to 64 letters, digits, '_', '.' or '-'", o.InstanceID)
	}
	switch o.FailureMode {
	case FailLocal, FailOpen, FailClosed:
	default:
		return bad("FailureMode %d: use FailLocal, FailOpen or FailClosed", o.FailureMode)
	}
	switch {
	case o.Timeout == 0:
		o.Timeout = DefaultTimeout
	case o.Timeout < 0:
		return bad("Timeout %v: it must be positive (0 means %v)", o.Timeout, DefaultTimeout)
	}
	switch {
	case o.MaxKeys == 0:
		o.MaxKeys = DefaultMaxKeys
	case o.MaxKeys < 0:
		return bad("MaxKeys %d: it must be positive (0 means %d)", o.MaxKeys, DefaultMaxKeys)
	}
	switch {
	case o.MaxKeyLength == 0:
		o.MaxKeyLength = DefaultMaxKeyLength
	case o.MaxKeyLength < 0:
		return bad("MaxKeyLength %d: it must be positive (0 means %d)", o.MaxKeyLength, DefaultMaxKeyLength)
	}
	if o.MinInstances < 0 {
		return bad("MinInstances %d: it must not be negative", o.MinInstances)
	}
	if o.BatchSize < 0 {
		return bad("BatchSize %d: it must not be negative (0 means 256)", o.BatchSize)
	}
	return nil
}

func prefixRune(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' || c == ':'
}

func defaultInstanceID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(c rune) rune {
		if c < 128 && prefixRune(c) && c != ':' {
			return c
		}
		return '-'
	}, host)
	if len(host) > 32 {
		host = host[:32]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	if host != "" {
		id = host + "-" + id
	}
	return id
}

func (l *Limiter) addRule(pr policy.Rule) (*rule, error) {
	if err := pr.Validate(); err != nil {
		return nil, err
	}
	if _, dup := l.rules[pr.Name]; dup {
		return nil, fmt.Errorf("%w %q: duplicate rule name: every rule needs a unique name", policy.ErrInvalidRule, pr.Name)
	}
	r := &rule{Rule: pr, mode: pr.Mode}
	if r.mode == policy.ModeDefault {
		r.mode = policy.Local
		if l.opts.Redis != nil {
			r.mode = policy.Eventual
		}
	}
	if r.mode != policy.Local && l.opts.Redis == nil {
		return nil, fmt.Errorf("%w %q: Mode %v needs a store: set Options.Redis, or use policy.Local", policy.ErrInvalidRule, pr.Name, r.mode)
	}
	if pr.Algorithm == policy.FixedWindow {
		r.geo = window.NewFixed(pr.Window)
	} else {
		r.geo = window.NewSliding(pr.Window, pr.Buckets())
	}
	r.precise = time.Duration(r.geo.Sub()) < preciseBelow
	r.ticked = !r.precise && l.clock == nil && r.mode != policy.Strict
	t, err := localcache.New(localcache.Config{Geometry: r.geo, Limit: pr.Limit, Eventual: r.mode != policy.Local, Keys: l.keys})
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", policy.ErrInvalidRule, pr.Name, err)
	}
	r.table = t
	l.rules[pr.Name] = r
	if len(l.fast) < maxFastRules {
		l.fast = append(l.fast, r)
	}
	return r, nil
}

// localNow is the local clock in ns since the Unix epoch: the Clock, or the
// system clock read through the monotonic clock (immune to wall-clock steps).
func (l *Limiter) localNow() int64 {
	if l.clock != nil {
		return l.clock.Now().UnixNano()
	}
	return l.baseN + int64(time.Since(l.base))
}

// now is the store time in ns.
func (l *Limiter) now() int64 {
	if l.sync != nil {
		return l.sync.Now()
	}
	return l.localNow()
}

func (l *Limiter) tick() {
	now := l.now()
	for _, r := range l.rules {
		r.table.Tick(now)
	}
}

// background publishes the time every tickEvery and sweeps idle keys.
func (l *Limiter) background() {
	defer l.wg.Done()
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	// Sweep about once per window of the shortest rule: keys are evicted
	// only once nothing of theirs is left in the window, so sweeping more
	// often finds little, and a sweep walks every key. A full cache asks
	// for an early sweep.
	sweepEvery := time.Minute
	for _, r := range l.rules {
		sweepEvery = min(sweepEvery, max(r.Window, time.Second))
	}
	lastSweep := time.Now()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if l.clock == nil {
			l.tick()
		}
		if time.Since(lastSweep) >= sweepEvery || (l.keys.Full() && time.Since(lastSweep) >= sweepEvery/10) {
			lastSweep = time.Now()
			now := l.now()
			for _, r := range l.rules {
				r.table.Sweep(now)
			}
		}
	}
}

// setInstances records N̂ and updates the caps.
func (l *Limiter) setInstances(n int) {
	n = max(n, l.opts.MinInstances, 1)
	if l.nhat.Swap(int64(n)) != int64(n) {
		l.setLimits()
	}
}

func (l *Limiter) setHealth(ok bool, _ error) {
	if l.degraded.Swap(!ok) != !ok {
		l.setLimits()
	}
}

// setLimits pushes the caps, shares and health to the shared tables.
func (l *Limiter) setLimits() {
	l.limitsMu.Lock()
	defer l.limitsMu.Unlock()
	n := l.nhat.Load()
	health := localcache.Healthy
	if l.degraded.Load() {
		health = failHealth(l.opts.FailureMode)
	}
	for _, r := range l.rules {
		if r.mode == policy.Local {
			continue
		}
		lim := localcache.Limits{
			Cap:    int64(math.Floor(l.opts.ErrorBudget * float64(r.Limit) / float64(n+1))),
			Share:  r.Limit / n,
			Health: health,
		}
		if r.table.Limits() != lim {
			r.table.SetLimits(lim)
		}
	}
}

func failHealth(m FailureMode) localcache.Health {
	switch m {
	case FailOpen:
		return localcache.FailOpen
	case FailClosed:
		return localcache.FailClosed
	}
	return localcache.FailLocal
}

func (l *Limiter) rule(name string) *rule {
	// Callers usually pass the same string constant the rule was built
	// with: the same bytes at the same address are the same name, without a
	// byte comparison.
	p := unsafe.StringData(name)
	for _, r := range l.fast {
		if unsafe.StringData(r.Name) == p && len(r.Name) == len(name) {
			return r
		}
	}
	for _, r := range l.fast {
		if r.Name == name {
			return r
		}
	}
	return l.rules[name]
}

// Allow checks one request for key under the named rule. See AllowN.
func (l *Limiter) Allow(ctx context.Context, rule, key string) (Decision, error) {
	return l.AllowN(ctx, rule, key, 1)
}

// AllowN checks a request of cost n for key under the named rule, and counts
// it if admitted. A denial is a Decision with Allowed false and a nil error.
// The error is non-nil only when the check could not be made: an unknown
// rule, a cost below 1 or above the rule's Limit, a key longer than
// Options.MaxKeyLength, a closed limiter, or a store failure under
// FailClosed (the Decision is then a denial).
//
// Within this instance's share of the error budget a check is local: one map
// lookup and one compare-and-swap, no allocation, no lock, no I/O. A check that
// would take the instance past its share is decided by the store, batched
// with the key's pending counts, and waits at most Options.Timeout or ctx's
// deadline. Strict rules always ask the store.
func (l *Limiter) AllowN(ctx context.Context, rule, key string, n int64) (Decision, error) {
	r := l.rule(rule)
	if r == nil || n < 1 || n > r.Limit || len(key) > l.opts.MaxKeyLength || l.closed.Load() {
		return l.reject(r, rule, key, n)
	}
	if r.ticked {
		switch v, res := r.table.TryAllow(key, n); res {
		case localcache.TryAllowed:
			return Decision{Allowed: true, Limit: r.Limit, Remaining: v, ResetAfter: r.table.ResetAfter()}, nil
		case localcache.TryDenied:
			return Decision{Limit: r.Limit, ResetAfter: r.table.ResetAfter(), RetryAfter: time.Duration(v)}, nil
		}
		return l.decide(ctx, r, key, n, r.table.Allow(key, n))
	}
	if r.mode == policy.Strict {
		return l.strict(ctx, r, key, n)
	}
	return l.decide(ctx, r, key, n, r.table.AllowAt(key, l.now(), n))
}

// reject explains why a check could not be made.
func (l *Limiter) reject(r *rule, name, key string, n int64) (Decision, error) {
	switch {
	case r == nil:
		return Decision{}, fmt.Errorf("%w %q", ErrUnknownRule, name)
	case n < 1 || n > r.Limit:
		return Decision{Limit: r.Limit}, fmt.Errorf("%w: cost %d for rule %q: it must be between 1 and the rule's Limit %d", ErrInvalidCost, n, name, r.Limit)
	case len(key) > l.opts.MaxKeyLength:
		return Decision{Limit: r.Limit}, fmt.Errorf("%w: %d bytes, the maximum is %d", ErrKeyTooLong, len(key), l.opts.MaxKeyLength)
	}
	return Decision{Limit: r.Limit}, ErrClosed
}

// decide turns a table's verdict into a decision, handing checks at the cap
// to the store.
func (l *Limiter) decide(ctx context.Context, r *rule, key string, n int64, v localcache.Verdict) (Decision, error) {
	switch v.Status {
	case localcache.Allowed:
		return Decision{Allowed: true, Limit: r.Limit, Remaining: v.Remaining, ResetAfter: v.ResetAfter}, nil
	case localcache.OverCap:
		ref, ok := r.table.Ref(key)
		if !ok {
			ref = nil
		}
		return l.reserve(ctx, r, key, ref, n)
	case localcache.StoreDown:
		return Decision{Limit: r.Limit, ResetAfter: v.ResetAfter}, ErrStoreUnavailable
	}
	return Decision{Limit: r.Limit, Remaining: v.Remaining, ResetAfter: v.ResetAfter, RetryAfter: retry(v.RetryAfter, v.ResetAfter)}, nil
}

// retry turns "never" (-1) into the reset time, the best hint there is.
func retry(ra, reset time.Duration) time.Duration {
	if ra < 0 {
		return reset
	}
	return ra
}

// reserve hands a check to the store.
func (l *Limiter) reserve(ctx context.Context, r *rule, key string, ref localcache.Ref, n int64) (Decision, error) {
	res, err := l.sync.Reserve(ctx, r.table, key, ref, n)
	if err == nil {
		d := Decision{Allowed: res.Admitted, Limit: r.Limit, Remaining: res.Remaining, ResetAfter: res.ResetAfter}
		if !res.Admitted {
			d.RetryAfter = retry(res.RetryAfter, res.ResetAfter)
		}
		return d, nil
	}
	switch {
	case errors.Is(err, syncer.ErrClosed):
		return Decision{Limit: r.Limit}, ErrClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Decision{Limit: r.Limit}, fmt.Errorf("sluice: check abandoned: %w", err)
	case errors.Is(err, syncer.ErrTimeout) && l.opts.FailureMode == FailLocal:
		// The store is up but did not answer in time. Admitting past the
		// cap would break the bound: deny, and let the caller retry once
		// the store has caught up.
		return Decision{Limit: r.Limit, ResetAfter: r.geo.ResetAfter(l.now()), RetryAfter: l.opts.SyncInterval}, nil
	}
	return l.fallback(r, key, n, err)
}

// fallback decides a check the store failed by the failure mode, counting
// what it admits locally.
func (l *Limiter) fallback(r *rule, key string, n int64, cause error) (Decision, error) {
	v := r.table.AllowDegraded(key, l.now(), n, failHealth(l.opts.FailureMode))
	d := Decision{Allowed: v.Status == localcache.Allowed, Limit: r.Limit, Remaining: v.Remaining, ResetAfter: v.ResetAfter}
	switch v.Status {
	case localcache.StoreDown:
		return d, fmt.Errorf("%w: %w", ErrStoreUnavailable, cause)
	case localcache.OverLimit:
		d.RetryAfter = retry(v.RetryAfter, v.ResetAfter)
	}
	return d, nil
}

// strict decides a check of a Strict rule in the store.
func (l *Limiter) strict(ctx context.Context, r *rule, key string, n int64) (Decision, error) {
	if !l.sync.Healthy() {
		return l.fallback(r, key, n, syncer.ErrUnavailable)
	}
	ref, ok := r.table.Ref(key)
	if !ok {
		ref = nil
	}
	return l.reserve(ctx, r, key, ref, n)
}

// Peek returns what Allow would see for key under the named rule, without
// counting anything: Allowed reports whether one more unit fits the window as
// this instance sees it, Remaining what is left. A key this instance does not
// track has its full Limit remaining.
func (l *Limiter) Peek(rule, key string) (Decision, error) {
	r := l.rule(rule)
	if r == nil {
		return Decision{}, fmt.Errorf("%w %q", ErrUnknownRule, rule)
	}
	if l.closed.Load() {
		return Decision{Limit: r.Limit}, ErrClosed
	}
	now := l.now()
	est, _, _ := r.table.Estimate(key, now)
	rem := max(r.Limit-int64(math.Ceil(est-1e-9)), 0)
	return Decision{Allowed: rem >= 1, Limit: r.Limit, Remaining: rem, ResetAfter: r.geo.ResetAfter(now)}, nil
}

// Flush pushes every pending count and pulls every touched key's totals now,
// and waits for it (bounded by ctx). Without a store it does nothing.
func (l *Limiter) Flush(ctx context.Context) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if l.sync == nil {
		return nil
	}
	if err := l.sync.Flush(ctx); err != nil {
		if errors.Is(err, syncer.ErrClosed) {
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
	close(l.stop)
	l.wg.Wait()
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

// Stats is a snapshot of a limiter's counters.
type Stats struct {
	// Keys is the number of keys tracked locally, across rules.
	Keys int64
	// Instances is N̂, the live-instance estimate used for the caps.
	Instances int64
	// Degraded reports whether the store is considered unreachable.
	Degraded bool
	// Sync holds the syncer's counters (zero without a store).
	Sync syncer.Stats
}

// Stats returns the limiter's counters.
func (l *Limiter) Stats() Stats {
	s := Stats{Keys: l.keys.Len(), Instances: l.nhat.Load(), Degraded: l.degraded.Load()}
	if l.sync != nil {
		s.Sync = l.sync.Stats()
	}
	return s
}
