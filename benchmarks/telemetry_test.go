package benchmarks

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// The telemetry settings of BenchmarkTelemetry.
var telemetrySettings = []string{"off", "global", "sdk"}

// BenchmarkTelemetry measures Allow (sluice eventual, idle syncer, allow
// path) with telemetry off (the no-op MeterProvider: checks are not
// counted), with the default (the global provider, which no application has
// set here: checks are not counted until one is) and with the real SDK (a
// ManualReader; collected after the timed loop, which checks the count).
// The three run side by side in one process. Names:
// set=<hot|10k>/tel=<off|global|sdk>/mode=<serial|parallel>.
func BenchmarkTelemetry(b *testing.B) {
	for _, set := range []string{"hot", "10k"} {
		b.Run("set="+set, func(b *testing.B) {
			ks := keySet(set)
			for _, tel := range telemetrySettings {
				b.Run("tel="+tel, func(b *testing.B) { benchTelemetry(b, ks, tel) })
			}
		})
	}
}

func benchTelemetry(b *testing.B, ks *KeySet, tel string) {
	srv := sharedRedis(b)
	c := srv.Client(8)
	b.Cleanup(func() { _ = c.Close() })
	opts := sluice.Options{Redis: c, Prefix: newPrefix(), ErrorBudget: 1, SyncInterval: time.Hour, MaxKeys: 2 * len(ks.Keys)}
	var reader *sdkmetric.ManualReader
	switch tel {
	case "off":
		opts.MeterProvider = noop.NewMeterProvider()
	case "sdk":
		reader = sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		opts.MeterProvider = metric.MeterProvider(mp)
	}
	l, err := sluice.New(opts, policy.Rule{Name: ruleName, Limit: allowLimit, Window: window})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	fill(b, ks.Keys, 1, func(k string) error {
		_, err := l.Allow(ctx, ruleName, k)
		return err
	})
	var checks atomic.Int64
	b.Run("mode=serial", func(b *testing.B) {
		b.ReportAllocs()
		keys, mask := ks.Sample, ks.Mask
		i := 0
		for b.Loop() {
			if d, _ := l.Allow(ctx, ruleName, keys[i&mask]); !d.Allowed {
				b.Fatal("denied")
			}
			i++
		}
		checks.Add(int64(i))
	})
	b.Run("mode=parallel", func(b *testing.B) {
		b.ReportAllocs()
		var seed atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			keys, mask := ks.Sample, ks.Mask
			i := int(seed.Add(7919))
			c := int64(0)
			for pb.Next() {
				if d, _ := l.Allow(ctx, ruleName, keys[i&mask]); !d.Allowed {
					b.Error("denied")
					return
				}
				i++
				c++
			}
			checks.Add(c)
		})
	})
	if reader != nil {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			b.Fatal(err)
		}
		var got int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "sluice.checks" {
					for _, p := range s.DataPoints {
						got += p.Value
					}
				}
			}
		}
		if want := checks.Load() + int64(len(ks.Keys)); got != want {
			b.Fatalf("sluice.checks = %d, want %d", got, want)
		}
	}
}
