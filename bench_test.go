package sluice_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/puzpuzpuz/xsync/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// benchKeys returns n distinct keys, built outside the timed loop.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkAllow measures Allow on the Eventual path (a real Redis behind
// it, syncing in the background) next to the floor: an xsync.MapOf load plus
// one atomic add on the same keys. The limit and error budget are large so
// that every check is admitted locally.
func BenchmarkAllow(b *testing.B) {
	srv := redistest.Start(b)
	rule := policy.Rule{Name: "api", Limit: policy.MaxLimit, Window: time.Hour}
	l, err := sluice.New(sluice.Options{Redis: srv.Client(b), ErrorBudget: 1}, rule)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	for _, n := range []int{1, 10_000} {
		keys := benchKeys(n)
		for _, k := range keys { // track every key first: measure steady state
			if _, err := l.Allow(ctx, rule.Name, k); err != nil {
				b.Fatal(err)
			}
		}
		floor := xsync.NewMapOf[string, *atomic.Int64]()
		for _, k := range keys {
			floor.Store(k, new(atomic.Int64))
		}
		name := strconv.Itoa(n) + "keys"
		allowLoops(b, "sluice/"+name, l, rule.Name, keys)
		b.Run("floor/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				v, _ := floor.Load(keys[i%n])
				v.Add(1)
			}
		})
		b.Run("floor/"+name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			var seed atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(seed.Add(7919))
				for pb.Next() {
					v, _ := floor.Load(keys[i%n])
					v.Add(1)
					i++
				}
			})
		})
	}
}

// allowLoops runs Allow of rule on l over keys, serially and in parallel,
// as sub-benchmarks name and name/parallel; every check must be admitted.
func allowLoops(b *testing.B, name string, l *sluice.Limiter, rule string, keys []string) {
	ctx := context.Background()
	n := len(keys)
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if d, _ := l.Allow(ctx, rule, keys[i%n]); !d.Allowed {
				b.Fatal("denied")
			}
		}
	})
	b.Run(name+"/parallel", func(b *testing.B) {
		b.ReportAllocs()
		var seed atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(seed.Add(7919))
			for pb.Next() {
				if d, _ := l.Allow(ctx, rule, keys[i%n]); !d.Allowed {
					b.Error("denied")
					return
				}
				i++
			}
		})
	})
}

// BenchmarkAllowLocal measures a Local rule (no store at all).
func BenchmarkAllowLocal(b *testing.B) {
	l, err := sluice.New(sluice.Options{}, policy.Rule{Name: "api", Limit: policy.MaxLimit, Window: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := l.Allow(ctx, "api", "k"); !d.Allowed {
			b.Fatal("denied")
		}
	}
}

// BenchmarkDeny measures the deny path on a full key.
func BenchmarkDeny(b *testing.B) {
	l, err := sluice.New(sluice.Options{}, policy.Rule{Name: "api", Limit: 10, Window: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	for range 10 {
		_, _ = l.Allow(ctx, "api", "k")
	}
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := l.Allow(ctx, "api", "k"); d.Allowed {
			b.Fatal("allowed")
		}
	}
}

// TestAllowDoesNotAllocate checks the Eventual hot path allocates nothing
// (the syncer is idle: a long interval).
func TestAllowDoesNotAllocate(t *testing.T) {
	srv := redistest.Start(t)
	l, err := sluice.New(sluice.Options{Redis: srv.Client(t), ErrorBudget: 1, SyncInterval: time.Hour},
		policy.Rule{Name: "api", Limit: policy.MaxLimit, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	keys := benchKeys(100)
	for _, k := range keys {
		_, _ = l.Allow(ctx, "api", k)
	}
	i := 0
	allocs := testing.AllocsPerRun(10000, func() {
		_, _ = l.Allow(ctx, "api", keys[i%len(keys)])
		i++
	})
	if allocs != 0 {
		t.Fatalf("Allow allocates %v times per call", allocs)
	}
}
