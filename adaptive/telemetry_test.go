package adaptive_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/sluicehq/sluice/adaptive"
)

// recorder is a MeterProvider that keeps the callbacks registered on it
// and, when collected, what they observe, by metric name and attributes.
type recorder struct {
	metricnoop.MeterProvider
	meter *recMeter
}

type recMeter struct {
	metricnoop.Meter
	callbacks map[*recReg]metric.Callback
}

type recReg struct {
	embedded.Registration
	m *recMeter
}

func (r *recReg) Unregister() error { delete(r.m.callbacks, r); return nil }

// named instruments: the observer tells them apart by name.
type (
	gauge struct {
		metricnoop.Int64ObservableGauge
		name string
	}
	updown struct {
		metricnoop.Int64ObservableUpDownCounter
		name string
	}
	counter struct {
		metricnoop.Int64ObservableCounter
		name string
	}
)

func (r *recorder) Meter(string, ...metric.MeterOption) metric.Meter { return r.meter }

func (m *recMeter) Int64ObservableGauge(name string, _ ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	return &gauge{name: name}, nil
}

func (m *recMeter) Int64ObservableUpDownCounter(name string, _ ...metric.Int64ObservableUpDownCounterOption) (metric.Int64ObservableUpDownCounter, error) {
	return &updown{name: name}, nil
}

func (m *recMeter) Int64ObservableCounter(name string, _ ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	return &counter{name: name}, nil
}

func (m *recMeter) RegisterCallback(f metric.Callback, _ ...metric.Observable) (metric.Registration, error) {
	r := &recReg{m: m}
	m.callbacks[r] = f
	return r, nil
}

type recObserver struct {
	embedded.Observer
	got map[string]int64 // "name attr=value ..." → value
}

func (o *recObserver) ObserveFloat64(metric.Float64Observable, float64, ...metric.ObserveOption) {}

func (o *recObserver) ObserveInt64(inst metric.Int64Observable, v int64, opts ...metric.ObserveOption) {
	var name string
	switch i := inst.(type) {
	case *gauge:
		name = i.name
	case *updown:
		name = i.name
	case *counter:
		name = i.name
	}
	attrs := metric.NewObserveConfig(opts).Attributes()
	for it := attrs.Iter(); it.Next(); {
		kv := it.Attribute()
		name += " " + string(kv.Key) + "=" + kv.Value.String()
	}
	o.got[name] = v
}

func (r *recorder) collect(t *testing.T) map[string]int64 {
	t.Helper()
	o := &recObserver{got: map[string]int64{}}
	for _, f := range r.meter.callbacks {
		require.NoError(t, f(context.Background(), o))
	}
	return o.got
}

// TestMetrics: the limit, the slots in flight, the refusals by priority and
// the releases by outcome are observed with the limiter's name; Close
// unregisters them.
func TestMetrics(t *testing.T) {
	t.Parallel()
	rec := &recorder{meter: &recMeter{callbacks: map[*recReg]metric.Callback{}}}
	l, err := adaptive.New(adaptive.Options{Algorithm: fixed{}, Initial: 10, MeterProvider: rec, Name: "api"})
	require.NoError(t, err)
	ctx := context.Background()
	var held []adaptive.Slot
	for range 9 {
		s, err := l.Acquire(ctx, adaptive.Critical)
		require.NoError(t, err)
		held = append(held, s)
	}
	for _, p := range []adaptive.Priority{adaptive.Sheddable, adaptive.Sheddable, adaptive.Default} {
		s, err := l.Acquire(ctx, p)
		require.NoError(t, err)
		require.False(t, s.OK())
	}
	held[0].Release(adaptive.Success)
	held[1].Release(adaptive.Dropped)
	held[2].Release(adaptive.Ignored)
	got := rec.collect(t)
	assert.Equal(t, map[string]int64{
		"sluice.adaptive.limit limiter=api":                    10,
		"sluice.adaptive.inflight limiter=api":                 6,
		"sluice.adaptive.shed limiter=api priority=critical":   0,
		"sluice.adaptive.shed limiter=api priority=default":    1,
		"sluice.adaptive.shed limiter=api priority=sheddable":  2,
		"sluice.adaptive.released limiter=api outcome=success": 1,
		"sluice.adaptive.released limiter=api outcome=dropped": 1,
		"sluice.adaptive.released limiter=api outcome=ignored": 1,
	}, got)
	require.NoError(t, l.Close())
	assert.Empty(t, rec.meter.callbacks)
	require.NoError(t, l.Close())
	for _, s := range held {
		s.Release(adaptive.Success)
	}
	assert.Equal(t, int64(0), l.Stats().InFlight)
}
