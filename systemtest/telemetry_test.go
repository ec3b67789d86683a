package systemtest

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// otelSDK is a real OpenTelemetry SDK for one limiter: metrics read on
// demand (ManualReader), spans kept in memory.
type otelSDK struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
	mp     *sdkmetric.MeterProvider
	tp     *sdktrace.TracerProvider
}

func newOtelSDK(t *testing.T) *otelSDK {
	t.Helper()
	s := &otelSDK{reader: sdkmetric.NewManualReader(), spans: tracetest.NewInMemoryExporter()}
	s.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(s.spans))
	t.Cleanup(func() {
		_ = s.mp.Shutdown(context.Background())
		_ = s.tp.Shutdown(context.Background())
	})
	return s
}

// options returns opts with the SDK's providers.
func (s *otelSDK) options(opts sluice.Options) sluice.Options {
	opts.MeterProvider, opts.TracerProvider = s.mp, s.tp
	return opts
}

// collect returns the metrics collected now, by name.
func (s *otelSDK) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, s.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// attrs renders an attribute set as "k=v,k=v" (sorted by key).
func attrs(s attribute.Set) string {
	var b []string
	for _, kv := range s.ToSlice() {
		b = append(b, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(b, ",")
}

// sumInt returns an int64 sum's points by attributes.
func sumInt(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	d, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T", m.Name, m.Data)
	out := map[string]int64{}
	for _, p := range d.DataPoints {
		out[attrs(p.Attributes)] = p.Value
	}
	return out
}

// sumOf returns the sum of an int64 sum's points.
func sumOf(t *testing.T, m metricdata.Metrics) (n int64) {
	t.Helper()
	for _, v := range sumInt(t, m) {
		n += v
	}
	return n
}

// gaugeInt returns the value of an int64 gauge with one point.
func gaugeInt(t *testing.T, m metricdata.Metrics) int64 {
	t.Helper()
	d, ok := m.Data.(metricdata.Gauge[int64])
	require.True(t, ok, "%s is a %T", m.Name, m.Data)
	require.Len(t, d.DataPoints, 1)
	return d.DataPoints[0].Value
}

// TestTelemetryChecks: N checks give sluice.checks = N, split by outcome
// and path as the limiter decided them: a Local rule's on the local path,
// a Strict rule's on the strict path, an Eventual key past its cap on the
// urgent path (as many as the store decided: Stats().Sync.Reservations),
// bad input as errors. The syncer's instruments match its counters.
func TestTelemetryChecks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	sdk := newOtelSDK(t)
	local := policy.Rule{Name: "local", Limit: 10, Window: time.Hour, Mode: policy.Local}
	strict := policy.Rule{Name: "strict", Limit: 5, Window: time.Hour, Mode: policy.Strict}
	eventual := policy.Rule{Name: "eventual", Limit: 100, Window: time.Hour}
	bucket := policy.Rule{Name: "bucket", Limit: 5, Window: time.Hour, Algorithm: policy.GCRA, Mode: policy.Strict}
	l, err := sluice.New(sdk.options(sluice.Options{Redis: srv.Client(t), Prefix: "tel", SyncInterval: time.Hour, ErrorBudget: 0.1,
		Timeout: 5 * time.Second}),
		local, strict, eventual, bucket)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()

	for range 25 {
		_, err := l.Allow(ctx, "local", "k")
		require.NoError(t, err)
	}
	_, err = l.AllowN(ctx, "local", "k", 11) // above the Limit: an error
	require.ErrorIs(t, err, sluice.ErrInvalidCost)
	for range 8 {
		_, err := l.Allow(ctx, "strict", "k")
		require.NoError(t, err)
	}
	for range 8 {
		_, err := l.Allow(ctx, "bucket", "k")
		require.NoError(t, err)
	}
	var allowed, denied int64
	for range 150 {
		d, err := l.Allow(ctx, "eventual", "k")
		require.NoError(t, err)
		if d.Allowed {
			allowed++
		} else {
			denied++
		}
	}
	require.NoError(t, l.Flush(ctx))

	m := sdk.collect(t)
	checks := sumInt(t, m["sluice.checks"])
	assert.Equal(t, "{check}", m["sluice.checks"].Unit)
	assert.Equal(t, int64(10), checks["outcome=allowed,path=local,rule=local"])
	assert.Equal(t, int64(15), checks["outcome=denied,path=local,rule=local"])
	assert.Equal(t, int64(1), checks["outcome=error,path=local,rule=local"])
	assert.Equal(t, int64(5), checks["outcome=allowed,path=strict,rule=strict"])
	assert.Equal(t, int64(3), checks["outcome=denied,path=strict,rule=strict"])
	assert.Equal(t, int64(5), checks["outcome=allowed,path=strict,rule=bucket"])
	assert.Equal(t, int64(3), checks["outcome=denied,path=strict,rule=bucket"])
	// The eventual rule: L admitted (its cap is 5 with N̂ = 1: the store
	// decides from the sixth on), the rest denied.
	assert.Equal(t, int64(100), allowed)
	var ev, evUrgent, evAllowed, evDenied int64
	for k, v := range checks {
		if !strings.HasSuffix(k, "rule=eventual") {
			continue
		}
		ev += v
		if strings.Contains(k, "path=urgent") {
			evUrgent += v
		}
		if strings.Contains(k, "outcome=allowed") {
			evAllowed += v
		}
		if strings.Contains(k, "outcome=denied") {
			evDenied += v
		}
		assert.NotContains(t, k, "outcome=error")
	}
	assert.Equal(t, int64(150), ev)
	assert.Equal(t, allowed, evAllowed)
	assert.Equal(t, denied, evDenied)
	st := l.Stats()
	assert.Positive(t, evUrgent)
	assert.Equal(t, st.Sync.Reservations, evUrgent+8+8, "every check the store decided is on the urgent or strict path")
	assert.Equal(t, int64(25+1+8+8+150), sumOf(t, m["sluice.checks"]))

	assert.Equal(t, st.Sync.UrgentCycles, sumOf(t, m["sluice.sync.urgent"]))
	assert.Equal(t, st.Sync.EarlySyncs, sumOf(t, m["sluice.sync.early"]))
	assert.GreaterOrEqual(t, sumOf(t, m["sluice.store.round_trips"]), st.Sync.UrgentCycles)
	assert.Equal(t, int64(1), gaugeInt(t, m["sluice.instances"]))
	assert.Equal(t, int64(3), sumOf(t, m["sluice.keys.tracked"]), "a Strict bucket keeps no local state while the store is up")
	assert.Equal(t, int64(0), gaugeInt(t, m["sluice.failure_mode.active"]))
	cyc, ok := m["sluice.sync.cycle.duration"].Data.(metricdata.Histogram[float64])
	require.True(t, ok)
	require.Len(t, cyc.DataPoints, 1)
	assert.Equal(t, "outcome=ok", attrs(cyc.DataPoints[0].Attributes))
	assert.Equal(t, uint64(st.Sync.Cycles), cyc.DataPoints[0].Count)
	assert.Equal(t, "s", m["sluice.sync.cycle.duration"].Unit)
	_, ok = m["sluice.store.errors"]
	assert.False(t, ok, "no store error")

	// Spans: one per cycle and one per urgent round trip, none per check.
	require.NoError(t, l.Close())
	st = l.Stats()
	var cycles, urgent int64
	for _, s := range sdk.spans.GetSpans() {
		switch s.Name {
		case "sluice.sync.cycle":
			cycles++
		case "sluice.sync.urgent":
			urgent++
		default:
			t.Errorf("unexpected span %q", s.Name)
		}
	}
	assert.Equal(t, st.Sync.Cycles, cycles)
	assert.Equal(t, st.Sync.UrgentCycles+8, urgent, "and one per check of the Strict bucket")
	// A closed limiter no longer reports its observable metrics.
	_, ok = sdk.collect(t)["sluice.checks"]
	assert.False(t, ok)
}

// TestTelemetryStoreKilled: a killed Redis shows as store errors (of kind
// connection), the failure mode active and its time growing, checks that
// needed the store on the fallback path, and one log line each way.
//
// The check made while Redis is up must be the store's decision (path
// strict): a long Timeout, as the default 50ms can pass on a loaded machine
// before the store answers, and a Strict check not answered in time is
// denied by FailLocal, without an error, on the fallback path
// (TestTelemetryStrictTimedOut).
func TestTelemetryStoreKilled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	sdk := newOtelSDK(t)
	var logs logbuf.Buffer
	l, err := sluice.New(sdk.options(sluice.Options{
		Redis: srv.Client(t), SyncInterval: 20 * time.Millisecond, Timeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}), policy.Rule{Name: "strict", Limit: 100, Window: time.Hour, Mode: policy.Strict})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	d, err := l.Allow(ctx, "strict", "k")
	require.NoError(t, err)
	require.True(t, d.Allowed, "the store decided the check made while it was up")

	srv.Kill()
	require.Eventually(t, func() bool { return l.Stats().Degraded }, 10*time.Second, 10*time.Millisecond)
	for range 5 {
		_, err := l.Allow(ctx, "strict", "k") // FailLocal: decided on the share
		require.NoError(t, err)
	}
	// Several failed cycles. The first failure may be a timeout (a call in
	// flight when the server died, or a loaded machine); the cycles after it
	// are refused.
	time.Sleep(100 * time.Millisecond)
	var m map[string]metricdata.Metrics
	var errs map[string]int64
	require.Eventually(t, func() bool {
		m = sdk.collect(t)
		errs = sumInt(t, m["sluice.store.errors"])
		return errs["kind=connection"] > 0
	}, 10*time.Second, 20*time.Millisecond, "a connection error among the store errors")
	assert.Equal(t, int64(1), gaugeInt(t, m["sluice.failure_mode.active"]))
	fm, ok := m["sluice.failure_mode.duration"].Data.(metricdata.Sum[float64])
	require.True(t, ok)
	require.Len(t, fm.DataPoints, 1)
	assert.Equal(t, "failure_mode=fail-local", attrs(fm.DataPoints[0].Attributes))
	down1 := fm.DataPoints[0].Value
	assert.Positive(t, down1)
	checks := sumInt(t, m["sluice.checks"])
	assert.Equal(t, int64(1), checks["outcome=allowed,path=strict,rule=strict"])
	assert.Equal(t, int64(5), checks["outcome=allowed,path=fallback,rule=strict"])
	lag, ok := m["sluice.sync.lag"].Data.(metricdata.Gauge[float64])
	require.True(t, ok)
	assert.GreaterOrEqual(t, lag.DataPoints[0].Value, 0.1, "no cycle has succeeded since the kill")

	srv.Restart()
	require.Eventually(t, func() bool { return !l.Stats().Degraded }, 10*time.Second, 10*time.Millisecond)
	m = sdk.collect(t)
	assert.Equal(t, int64(0), gaugeInt(t, m["sluice.failure_mode.active"]))
	fm = m["sluice.failure_mode.duration"].Data.(metricdata.Sum[float64])
	down2 := fm.DataPoints[0].Value
	assert.Greater(t, down2, down1)
	time.Sleep(50 * time.Millisecond)
	fm = sdk.collect(t)["sluice.failure_mode.duration"].Data.(metricdata.Sum[float64])
	assert.Equal(t, down2, fm.DataPoints[0].Value, "the failure-mode time stops when the store is back")

	out := logs.String()
	assert.Equal(t, 1, strings.Count(out, "store unreachable"), out)
	assert.Equal(t, 1, strings.Count(out, "store reachable again"), out)
	var failed int
	for _, s := range sdk.spans.GetSpans() {
		if s.Name == "sluice.sync.cycle" && s.Status.Code.String() == "Error" {
			failed++
		}
	}
	assert.Positive(t, failed, "failed cycles are error spans")
}

// TestTelemetryStrictTimedOut: a Strict check that the store, up but hung,
// does not answer within Timeout is denied by FailLocal without an error
// and counted on the fallback path, not the strict one: what
// TestTelemetryStoreKilled's first check met when a loaded machine made the
// store's answer later than the default Timeout.
func TestTelemetryStrictTimedOut(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	sdk := newOtelSDK(t)
	l, err := sluice.New(sdk.options(sluice.Options{Redis: srv.Client(t), Prefix: "teltimeout", SyncInterval: time.Hour}),
		policy.Rule{Name: "strict", Limit: 100, Window: time.Hour, Mode: policy.Strict})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	srv.Pause()
	t.Cleanup(srv.Resume) // before Close: cleanups run last first
	d, err := l.Allow(context.Background(), "strict", "k")
	require.NoError(t, err, "FailLocal denies a Strict check the store did not answer in time")
	assert.False(t, d.Allowed)
	assert.Equal(t, time.Hour, d.RetryAfter, "retry after a sync interval")
	checks := sumInt(t, sdk.collect(t)["sluice.checks"])
	assert.Equal(t, map[string]int64{"outcome=denied,path=fallback,rule=strict": 1}, checks)
}

// TestTelemetryAccuracyExcess: two instances share a key. A fills it to its
// limit L while B's view is stale; B then admits its divergence cap
// ⌊ε·L/(N̂+1)⌋ locally, as the bound allows, and the pull of B's next sync
// finds the key's fleet total that far above L: sluice.accuracy.excess
// records cap/L, non-zero and within ε.
func TestTelemetryAccuracyExcess(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const limit, budget = 100, 0.5
	rule := policy.Rule{Name: "api", Limit: limit, Window: time.Hour}
	sdkA, sdkB := newOtelSDK(t), newOtelSDK(t)
	// A long Timeout: on a loaded machine a store decision must not turn
	// into a fallback.
	opts := sluice.Options{Prefix: "excess", SyncInterval: time.Hour, ErrorBudget: budget, MinInstances: 2, Timeout: 5 * time.Second}
	opts.Redis = srv.Client(t)
	a, err := sluice.New(sdkA.options(opts), rule)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	opts.Redis = srv.Client(t)
	b, err := sluice.New(sdkB.options(opts), rule)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	_, err = b.Allow(ctx, "api", "k") // B tracks the key, its view: 1
	require.NoError(t, err)
	require.NoError(t, b.Flush(ctx))
	// B admits on a cap only once A has heartbeated twice since B
	// registered (until then A's N̂ may leave B out, or A may hold counts
	// admitted on a cap sized without B: docs/design-bound.md, "Joining the
	// fleet"), which B learns at its own heartbeats.
	// Heartbeats are compared in whole ms of the store's clock, this
	// host's: each waits for the next.
	for range 2 {
		time.Sleep(2 * time.Millisecond)
		require.NoError(t, a.Flush(ctx))
		time.Sleep(2 * time.Millisecond)
		require.NoError(t, b.Flush(ctx))
	}
	var admitted int64
	for range 2 * limit {
		d, err := a.Allow(ctx, "api", "k")
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	require.NoError(t, a.Flush(ctx))
	require.Equal(t, int64(limit-1), admitted, "A fills the key to L")

	cap := int64(math.Floor(budget * limit / 3)) // N̂ = 2
	var local int64
	for range cap + 5 {
		d, err := b.Allow(ctx, "api", "k")
		require.NoError(t, err)
		if d.Allowed {
			local++
		}
	}
	require.NoError(t, b.Flush(ctx))
	require.Equal(t, cap, local, "B admits its cap locally (its first unit is acknowledged)")

	h, ok := sdkB.collect(t)["sluice.accuracy.excess"].Data.(metricdata.Histogram[float64])
	require.True(t, ok)
	require.Len(t, h.DataPoints, 1)
	p := h.DataPoints[0]
	assert.Equal(t, "rule=api", attrs(p.Attributes))
	assert.Positive(t, p.Count)
	mx, ok := p.Max.Value()
	require.True(t, ok)
	assert.InDelta(t, float64(cap)/limit, mx, 1e-9, "the fleet stood B's local admissions above L")
	assert.LessOrEqual(t, mx, budget)
	_, ok = sdkA.collect(t)["sluice.accuracy.excess"]
	assert.False(t, ok, "A never pulled the key above L")
}

// TestTelemetryAllowDoesNotAllocate: with a real SDK (and its collection),
// Allow allocates nothing.
func TestTelemetryAllowDoesNotAllocate(t *testing.T) {
	srv := redistest.Start(t)
	sdk := newOtelSDK(t)
	l, err := sluice.New(sdk.options(sluice.Options{Redis: srv.Client(t), ErrorBudget: 1, SyncInterval: time.Hour}),
		policy.Rule{Name: "api", Limit: policy.MaxLimit, Window: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	for range 100 {
		_, _ = l.Allow(ctx, "api", "k")
	}
	allocs := testing.AllocsPerRun(10000, func() { _, _ = l.Allow(ctx, "api", "k") })
	assert.Zero(t, allocs)
	assert.Equal(t, int64(100+10001), sumOf(t, sdk.collect(t)["sluice.checks"]))
}

// TestTelemetryGlobalProvider: a limiter built before the application sets
// the global MeterProvider (no Options.MeterProvider) counts no check until
// then, and counts every check once the provider is set, through the
// instruments it registered at New. It is the only test of this package
// that sets the global provider, which can be set only once for good; the
// limiters of the other tests that are built after it count into it, under
// their own rule names.
func TestTelemetryGlobalProvider(t *testing.T) {
	t.Parallel()
	l, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "global-api", Limit: 100, Window: time.Hour},
		policy.Rule{Name: "global-probe", Limit: policy.MaxLimit, Window: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	for range 3 {
		_, err := l.Allow(ctx, "global-api", "k")
		require.NoError(t, err)
	}

	sdk := newOtelSDK(t)
	otel.SetMeterProvider(sdk.mp)
	checks := func(rule string) int64 {
		m, ok := sdk.collect(t)["sluice.checks"]
		if !ok {
			return 0 // no check counted yet
		}
		d, ok := m.Data.(metricdata.Sum[int64])
		require.True(t, ok, "%s is a %T", m.Name, m.Data)
		var n int64
		for _, p := range d.DataPoints {
			if v, ok := p.Attributes.Value("rule"); ok && v.AsString() == rule {
				n += p.Value
			}
		}
		return n
	}
	// The limiter's background loop sees the provider within a tick: probe
	// until a check is counted (every rule resumes at once).
	require.Eventually(t, func() bool {
		_, err := l.Allow(ctx, "global-probe", "k")
		return err == nil && checks("global-probe") > 0
	}, 10*time.Second, time.Millisecond)

	for range 2 {
		_, err := l.Allow(ctx, "global-api", "k")
		require.NoError(t, err)
	}
	assert.Equal(t, int64(2), checks("global-api"), "the three checks before the provider was set are not counted")
}

// TestTelemetryShaping: a soft rule's admissions past Limit count on the
// soft path, a shadow rule's would-be denials (admitted) on the shadow
// path with the outcome the rule would have had.
func TestTelemetryShaping(t *testing.T) {
	t.Parallel()
	sdk := newOtelSDK(t)
	l, err := sluice.New(sdk.options(sluice.Options{}),
		policy.Rule{Name: "soft", Limit: 10, Window: time.Hour, Soft: 0.5},
		policy.Rule{Name: "shadow", Limit: 2, Window: time.Hour, Shadow: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	var softAllowed, shadowAllowed int
	for range 20 {
		d, err := l.Allow(ctx, "soft", "k")
		require.NoError(t, err)
		if d.Allowed {
			softAllowed++
		}
	}
	for range 5 {
		d, err := l.Allow(ctx, "shadow", "k")
		require.NoError(t, err)
		if d.Allowed {
			shadowAllowed++
		}
	}
	require.Equal(t, 15, softAllowed)
	require.Equal(t, 5, shadowAllowed, "a shadow rule never denies")
	checks := sumInt(t, sdk.collect(t)["sluice.checks"])
	assert.Equal(t, map[string]int64{
		"outcome=allowed,path=local,rule=soft":   10,
		"outcome=allowed,path=soft,rule=soft":    5,
		"outcome=denied,path=local,rule=soft":    5,
		"outcome=allowed,path=local,rule=shadow": 2,
		"outcome=denied,path=shadow,rule=shadow": 3,
	}, checks)
}

// TestTelemetryInFlight: the Acquires of InFlight rules are counted by
// rule, outcome and path (a Local rule's on the local path, a fleet rule's
// on the strict path while the store answers and on the fallback path once
// it is gone, bad input as errors), and sluice.inflight.held follows the
// slots held, up with each admission and down with each Release.
func TestTelemetryInFlight(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	sdk := newOtelSDK(t)
	l, err := sluice.New(sdk.options(sluice.Options{Redis: srv.Client(t), Prefix: "telinf", SyncInterval: 20 * time.Millisecond,
		MaxKeyLength: 8, Timeout: 5 * time.Second}), // the acquires before the kill are the store's, however loaded the machine
		policy.Rule{Name: "local", Limit: 3, InFlight: true, Mode: policy.Local},
		policy.Rule{Name: "fleet", Limit: 2, InFlight: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	acquire := func(rule string, n int) (slots []sluice.Slot) {
		for range n {
			s, _, err := l.Acquire(ctx, rule, "k")
			require.NoError(t, err)
			if s.Held() {
				slots = append(slots, s)
			}
		}
		return slots
	}
	local, fleet := acquire("local", 5), acquire("fleet", 4)
	require.Len(t, local, 3)
	require.Len(t, fleet, 2)
	_, _, err = l.Acquire(ctx, "local", "a key too long")
	require.ErrorIs(t, err, sluice.ErrKeyTooLong)

	m := sdk.collect(t)
	assert.Equal(t, "{acquire}", m["sluice.inflight.acquires"].Unit)
	assert.Equal(t, map[string]int64{
		"outcome=allowed,path=local,rule=local":  3,
		"outcome=denied,path=local,rule=local":   2,
		"outcome=error,path=local,rule=local":    1,
		"outcome=allowed,path=strict,rule=fleet": 2,
		"outcome=denied,path=strict,rule=fleet":  2,
	}, sumInt(t, m["sluice.inflight.acquires"]))
	assert.Equal(t, map[string]int64{"rule=local": 3, "rule=fleet": 2}, sumInt(t, m["sluice.inflight.held"]))

	local[0].Release()
	local[0].Release() // a second Release does nothing
	fleet[1].Release()
	assert.Equal(t, map[string]int64{"rule=local": 2, "rule=fleet": 1}, sumInt(t, sdk.collect(t)["sluice.inflight.held"]))

	// The store gone: FailLocal admits up to ⌊Limit/N̂⌋ = 2 per instance,
	// counting the one held.
	srv.Kill()
	require.Eventually(t, func() bool { return l.Stats().Degraded }, 10*time.Second, 10*time.Millisecond)
	fleet = append(fleet, acquire("fleet", 2)...)
	acq := sumInt(t, sdk.collect(t)["sluice.inflight.acquires"])
	assert.Equal(t, int64(1), acq["outcome=allowed,path=fallback,rule=fleet"])
	assert.Equal(t, int64(1), acq["outcome=denied,path=fallback,rule=fleet"])
	assert.Equal(t, int64(2), sumInt(t, sdk.collect(t)["sluice.inflight.held"])["rule=fleet"])
	for _, s := range append(local, fleet...) {
		s.Release()
	}
	assert.Equal(t, map[string]int64{"rule=local": 0, "rule=fleet": 0}, sumInt(t, sdk.collect(t)["sluice.inflight.held"]))
}
