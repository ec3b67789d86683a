package sluice

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/syncport"
)

// instrumentationName names the meter and the tracer of every Limiter.
const instrumentationName = "github.com/sluicehq/sluice"

// The store error kinds of sluice.store.errors.
const (
	errTimeout = iota
	errConnection
	errReply
	errOther
	errConfig
	errRefused
	numErrKinds
)

var errKindNames = [numErrKinds]string{"timeout", "connection", "reply", "other", "config", "refused"}

// telemetry is a Limiter's metrics, spans and the state they report that
// the limiter does not keep otherwise. Nothing here runs per check: the
// checks are counted on each rule's engine.Counts, which the metrics read
// when they are collected. It implements syncport.Observer.
type telemetry struct {
	logger *slog.Logger
	tracer trace.Tracer
	meter  metric.Meter
	count  bool // the MeterProvider is not the no-op one: count checks
	reg    metric.Registration
	// unset is the global MeterProvider's stand-in, which the limiter got
	// when no application had set one before it was built; waiting is true
	// until the application sets one (watchGlobal). Meanwhile the rules'
	// counts are paused: nothing could read them.
	unset   metric.MeterProvider
	waiting atomic.Bool

	// Synchronous instruments, recorded by the syncer's loop.
	cycleTime  metric.Float64Histogram
	cycleKeys  metric.Int64Histogram
	storeErrs  metric.Int64Counter
	excess     metric.Float64Histogram
	cycleOK    metric.MeasurementOption
	cycleErr   metric.MeasurementOption
	errKinds   [numErrKinds]metric.MeasurementOption
	excessAttr sync.Map // rule name → metric.MeasurementOption

	mu        sync.Mutex
	rules     []*ruleTelemetry
	inflight  []*ruleTelemetry // the InFlight rules' Acquires
	downSince time.Time        // zero while the store is healthy
	downTotal time.Duration    // failure-mode time of the outages that ended
	synced    time.Time        // start of the last cycle that left nothing unacknowledged

	evicted atomic.Int64 // keys evicted by the sweeps
}

// ruleTelemetry is one rule's check counts and their attribute sets.
type ruleTelemetry struct {
	name   string
	counts *engine.Counts
	attrs  [engine.NumPaths][engine.NumOutcomes]metric.ObserveOption
	self   metric.ObserveOption // rule = name
}

// newTelemetry returns the telemetry of a limiter with opts (filled).
func newTelemetry(opts *Options) *telemetry {
	t := &telemetry{logger: opts.Logger, synced: time.Now()}
	mp, tp := opts.MeterProvider, opts.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	_, off := mp.(metricnoop.MeterProvider)
	t.count = !off
	if unsetGlobal(mp) { // the default, or the same stand-in passed in opts
		t.unset = mp
		t.waiting.Store(true)
	}
	t.meter = mp.Meter(instrumentationName)
	t.tracer = tp.Tracer(instrumentationName)
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	t.cycleTime, err = t.meter.Float64Histogram("sluice.sync.cycle.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of a full sync cycle (push every pending count, pull every touched key's totals)."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
	keep(err)
	t.cycleKeys, err = t.meter.Int64Histogram("sluice.sync.cycle.keys", metric.WithUnit("{key}"),
		metric.WithDescription("Keys pushed and pulled by a full sync cycle."),
		metric.WithExplicitBucketBoundaries(0, 1, 10, 100, 1000, 10_000, 100_000, 1_000_000))
	keep(err)
	t.storeErrs, err = t.meter.Int64Counter("sluice.store.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Store round trips that failed, by kind: timeout, connection, reply (Redis answered an error), config (the store refuses this client: credentials, ACL permissions, scripting disabled), refused (it refuses writes: out of memory, read-only replica, MISCONF), other."))
	keep(err)
	t.excess, err = t.meter.Float64Histogram("sluice.accuracy.excess", metric.WithUnit("1"),
		metric.WithDescription("At a pull, how far a key's fleet total stood above its limit, as a fraction of the limit (recorded only for keys above it)."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1))
	keep(err)
	t.cycleOK = metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", "ok")))
	t.cycleErr = metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", "error")))
	for k, name := range errKindNames {
		t.errKinds[k] = metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", name)))
	}
	if len(errs) > 0 {
		t.logger.Warn("sluice: some metrics could not be created", "err", errors.Join(errs...))
	}
	return t
}

// addRule returns the check counts of a rule, nil if checks are not
// counted (the no-op MeterProvider). A rule built again under the same name
// (a new rule set) keeps its counts: the counters never go back.
func (t *telemetry) addRule(name string) *engine.Counts { return t.add(&t.rules, name) }

// addInflight returns the Acquire counts of an InFlight rule, as addRule
// those of a rate rule's checks.
func (t *telemetry) addInflight(name string) *engine.Counts { return t.add(&t.inflight, name) }

// add returns the counts of name in rules, added if new; nil if checks are
// not counted.
func (t *telemetry) add(rules *[]*ruleTelemetry, name string) *engine.Counts {
	if !t.count {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, rt := range *rules {
		if rt.name == name {
			return rt.counts
		}
	}
	rt := &ruleTelemetry{name: name, counts: new(engine.Counts)}
	self := metric.WithAttributeSet(attribute.NewSet(attribute.String("rule", name)))
	rt.self = self
	if t.waiting.Load() {
		rt.counts.Pause()
	}
	for p := range engine.NumPaths {
		for o := range engine.NumOutcomes {
			rt.attrs[p][o] = metric.WithAttributeSet(attribute.NewSet(
				attribute.String("rule", name),
				attribute.String("outcome", o.String()),
				attribute.String("path", p.String()),
			))
		}
	}
	t.excessAttr.Store(name, self)
	*rules = append(*rules, rt)
	return rt.counts
}

// globalPkg is the package of the stand-in that otel.GetMeterProvider
// returns until an application sets a provider (otel.SetMeterProvider): it
// forwards to the one set then.
const globalPkg = "go.opentelemetry.io/otel/internal/global"

// unsetGlobal reports whether mp is that stand-in.
func unsetGlobal(mp metric.MeterProvider) bool {
	rt := reflect.TypeOf(mp)
	return rt != nil && rt.Kind() == reflect.Pointer && rt.Elem().PkgPath() == globalPkg
}

// watchGlobal starts counting checks once the application has set the
// global MeterProvider that the limiter's instruments forward to, unless it
// set the no-op one. The background loop calls it every tick: the checks of
// the millisecond before are not counted, nor those before it was set, when
// no provider could collect them.
func (t *telemetry) watchGlobal() {
	if !t.waiting.Load() {
		return
	}
	mp := otel.GetMeterProvider()
	if mp == t.unset { // a set provider has another type: no panic on comparing
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.waiting.Store(false)
	if _, off := mp.(metricnoop.MeterProvider); off {
		return
	}
	for _, rt := range t.rules {
		rt.counts.Resume()
	}
	for _, rt := range t.inflight {
		rt.counts.Resume()
	}
}

// start registers the observable instruments, which read l when the
// metrics are collected.
func (t *telemetry) start(l *Limiter) {
	if !t.count {
		return
	}
	m := t.meter
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	checks, err := m.Int64ObservableCounter("sluice.checks", metric.WithUnit("{check}"),
		metric.WithDescription("Checks by rule, outcome (allowed, denied, error) and path (local, urgent, strict, fallback, shadow, soft)."))
	keep(err)
	instances, err := m.Int64ObservableGauge("sluice.instances", metric.WithUnit("{instance}"),
		metric.WithDescription("N̂, the live instances this instance splits the error budget among."))
	keep(err)
	tracked, err := m.Int64ObservableUpDownCounter("sluice.keys.tracked", metric.WithUnit("{key}"),
		metric.WithDescription("Keys tracked in the local cache, across rules."))
	keep(err)
	evictions, err := m.Int64ObservableCounter("sluice.keys.evictions", metric.WithUnit("{key}"),
		metric.WithDescription("Keys evicted from the local cache once idle."))
	keep(err)
	untracked, err := m.Int64ObservableCounter("sluice.keys.untracked", metric.WithUnit("{check}"),
		metric.WithDescription("Checks of keys the local cache keeps out (admission rule, or the key bound reached)."))
	keep(err)
	fmActive, err := m.Int64ObservableGauge("sluice.failure_mode.active", metric.WithUnit("{state}"),
		metric.WithDescription("1 while the store is unreachable, refuses writes or refuses this client, and checks that need it are decided by the failure mode."))
	keep(err)
	fmTime, err := m.Float64ObservableCounter("sluice.failure_mode.duration", metric.WithUnit("s"),
		metric.WithDescription("Time spent on the failure mode, the store unreachable or refusing."))
	keep(err)
	acquires, err := m.Int64ObservableCounter("sluice.inflight.acquires", metric.WithUnit("{acquire}"),
		metric.WithDescription("Acquires of InFlight rules by rule, outcome (allowed, denied: every slot taken, error) and path (local, strict: decided in the store, fallback: by the failure mode)."))
	keep(err)
	held, err := m.Int64ObservableUpDownCounter("sluice.inflight.held", metric.WithUnit("{slot}"),
		metric.WithDescription("In-flight slots this instance holds, by rule."))
	keep(err)
	observables := []metric.Observable{checks, instances, tracked, evictions, untracked, fmActive, fmTime, acquires, held}
	var urgent, early, trips metric.Int64ObservableCounter
	var lag metric.Float64ObservableGauge
	if l.sync != nil {
		urgent, err = m.Int64ObservableCounter("sluice.sync.urgent", metric.WithUnit("{sync}"),
			metric.WithDescription("Urgent syncs: round trips of checks handed to the store (keys at their cap, untracked keys, Strict rules)."))
		keep(err)
		early, err = m.Int64ObservableCounter("sluice.sync.early", metric.WithUnit("{key}"),
			metric.WithDescription("Early syncs: busy keys synced in the background, with a lease request, once half of their local allowance was used, so that their checks need not wait."))
		keep(err)
		trips, err = m.Int64ObservableCounter("sluice.store.round_trips", metric.WithUnit("{round_trip}"),
			metric.WithDescription("Round trips to Redis (pipelines and single calls)."))
		keep(err)
		lag, err = m.Float64ObservableGauge("sluice.sync.lag", metric.WithUnit("s"),
			metric.WithDescription("Time since the start of the last sync cycle that synced every key it took without error. Keys far from their limit and their cap keep their counts pending on purpose (need-driven sync)."))
		keep(err)
		observables = append(observables, urgent, early, trips, lag)
	}
	mode := metric.WithAttributeSet(attribute.NewSet(attribute.String("failure_mode", l.opts.FailureMode.String())))
	t.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t.mu.Lock()
		rules, inflight := t.rules, t.inflight
		down := !t.downSince.IsZero()
		fm := t.downTotal
		if down {
			fm += time.Since(t.downSince)
		}
		synced := t.synced
		t.mu.Unlock()
		for _, rt := range rules {
			rt.observe(o, checks)
		}
		for _, rt := range inflight {
			rt.observe(o, acquires)
			if r := l.inf.rule(rt.name); r != nil {
				o.ObserveInt64(held, r.heldAll(), rt.self)
			}
		}
		o.ObserveInt64(instances, l.nhat.Load())
		o.ObserveInt64(tracked, l.keys.Usage().Len())
		o.ObserveInt64(evictions, t.evicted.Load())
		o.ObserveInt64(untracked, l.keys.Usage().Untracked())
		active := int64(0)
		if down {
			active = 1
		}
		o.ObserveInt64(fmActive, active, mode)
		o.ObserveFloat64(fmTime, fm.Seconds(), mode)
		if l.sync != nil {
			st := l.sync.Stats()
			o.ObserveInt64(urgent, st.UrgentCycles)
			o.ObserveInt64(early, st.EarlySyncs)
			o.ObserveInt64(trips, st.RoundTrips)
			o.ObserveFloat64(lag, time.Since(synced).Seconds())
		}
		return nil
	}, observables...)
	keep(err)
	if len(errs) > 0 {
		t.logger.Warn("sluice: some metrics could not be registered", "err", errors.Join(errs...))
	}
}

// close stops reporting the observable metrics.
func (t *telemetry) close() {
	if t.reg != nil {
		_ = t.reg.Unregister()
	}
}

// setDown records whether the store is down; when it comes back it returns
// how long it was down.
func (t *telemetry) setDown(down bool) (was time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case down && t.downSince.IsZero():
		t.downSince = time.Now()
	case !down && !t.downSince.IsZero():
		was = time.Since(t.downSince)
		t.downTotal += was
		t.downSince = time.Time{}
	}
	return was
}

// Cycle records a full sync cycle: its duration and keys, and a span.
func (t *telemetry) Cycle(start time.Time, d time.Duration, keys int, err error) {
	outcome := t.cycleOK
	if err != nil {
		outcome = t.cycleErr
	} else {
		t.mu.Lock()
		if start.After(t.synced) {
			t.synced = start
		}
		t.mu.Unlock()
	}
	ctx := context.Background()
	t.cycleTime.Record(ctx, d.Seconds(), outcome)
	t.cycleKeys.Record(ctx, int64(keys), outcome)
	t.span("sluice.sync.cycle", start, d, err, attribute.Int("sluice.keys", keys))
}

// Urgent records a round trip of reservations as a span.
func (t *telemetry) Urgent(start time.Time, d time.Duration, checks, keys int, err error) {
	t.span("sluice.sync.urgent", start, d, err, attribute.Int("sluice.keys", keys), attribute.Int("sluice.checks", checks))
}

// span records a span that started at start and took d.
func (t *telemetry) span(name string, start time.Time, d time.Duration, err error, attrs ...attribute.KeyValue) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	_, sp := t.tracer.Start(context.Background(), name, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(attrs, attribute.String("sluice.outcome", outcome))...))
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End(trace.WithTimestamp(start.Add(d)))
}

// StoreError counts a failed round trip by kind.
func (t *telemetry) StoreError(err error) {
	t.storeErrs.Add(context.Background(), 1, t.errKinds[errKind(err)])
}

// OverLimit records how far a pulled key stood above its limit.
func (t *telemetry) OverLimit(rule string, excess float64) {
	if a, ok := t.excessAttr.Load(rule); ok {
		t.excess.Record(context.Background(), excess, a.(metric.MeasurementOption))
	}
}

// errKind classifies a store error.
func errKind(err error) int {
	var rerr redis.Error
	var nerr net.Error
	switch {
	case errors.Is(err, ErrStoreConfig):
		return errConfig
	case errors.Is(err, syncport.ErrWritesRefused):
		return errRefused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return errTimeout
	case errors.As(err, &rerr):
		return errReply
	case errors.As(err, &nerr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, redis.ErrClosed):
		return errConnection
	}
	return errOther
}

// count counts a check of r whose engine decided d and err (before shape):
// a soft rule's admission past Limit on the soft path, a shadow rule's
// denial that shape turns into an admission on the shadow path (with the
// engine's outcome: what the rule would have done), then the check itself.
func (r *rule) count(d Decision, err error) {
	if r.counts == nil {
		return
	}
	o := engine.OutcomeOf(d.Allowed, err)
	switch {
	case d.Allowed && r.extra > 0 && d.Remaining < r.extra:
		r.counts.Add(engine.PathSoft, o)
	case r.shadow && !d.Allowed && (err == nil || errors.Is(err, ErrStoreUnavailable)):
		r.counts.Add(engine.PathShadow, o)
	}
	r.counts.Check(o)
}

// observe reports rt's counts to inst, one point per path and outcome that
// has any.
func (rt *ruleTelemetry) observe(o metric.Observer, inst metric.Int64Observable) {
	s := rt.counts.Snapshot()
	for p := range engine.NumPaths {
		for oc := range engine.NumOutcomes {
			if v := s[p][oc]; v > 0 {
				o.ObserveInt64(inst, int64(v), rt.attrs[p][oc])
			}
		}
	}
}
