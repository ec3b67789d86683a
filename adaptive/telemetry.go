package adaptive

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// instrumentationName names the meter of every Limiter.
const instrumentationName = "github.com/sluicehq/sluice/adaptive"

// register registers the Limiter's metrics, all observed when collected
// (nothing is recorded per request): the limit, the slots in flight, the
// refusals by priority and the releases by outcome, each with the
// attribute limiter = Options.Name. A failed registration goes to the
// OpenTelemetry error handler: the Limiter works without its metrics.
func (l *Limiter) register(mp metric.MeterProvider, name string) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	limit, err := m.Int64ObservableGauge("sluice.adaptive.limit", metric.WithUnit("{request}"),
		metric.WithDescription("The current concurrency limit L, within its floor and ceiling."))
	keep(err)
	inflight, err := m.Int64ObservableUpDownCounter("sluice.adaptive.inflight", metric.WithUnit("{request}"),
		metric.WithDescription("Requests holding a slot."))
	keep(err)
	shed, err := m.Int64ObservableCounter("sluice.adaptive.shed", metric.WithUnit("{request}"),
		metric.WithDescription("Requests refused, by priority (critical, default, sheddable)."))
	keep(err)
	released, err := m.Int64ObservableCounter("sluice.adaptive.released", metric.WithUnit("{request}"),
		metric.WithDescription("Slots released, by outcome (success, dropped, ignored)."))
	keep(err)
	self := attribute.String("limiter", name)
	base := metric.WithAttributeSet(attribute.NewSet(self))
	var byPriority [NumPriorities]metric.ObserveOption
	for p := range byPriority {
		byPriority[p] = metric.WithAttributeSet(attribute.NewSet(self, attribute.String("priority", Priority(p).String())))
	}
	var byOutcome [3]metric.ObserveOption
	for o, n := range [3]string{"success", "dropped", "ignored"} {
		byOutcome[o] = metric.WithAttributeSet(attribute.NewSet(self, attribute.String("outcome", n)))
	}
	if len(errs) == 0 {
		l.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			s := l.Stats()
			o.ObserveInt64(limit, s.Limit, base)
			o.ObserveInt64(inflight, s.InFlight, base)
			for p, n := range s.Shed {
				o.ObserveInt64(shed, n, byPriority[p])
			}
			for i, n := range [3]int64{s.Completed, s.Dropped, s.Ignored} {
				o.ObserveInt64(released, n, byOutcome[i])
			}
			return nil
		}, limit, inflight, shed, released)
		keep(err)
	}
	if len(errs) > 0 {
		otel.Handle(errors.Join(errs...))
	}
}
