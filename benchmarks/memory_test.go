package benchmarks

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// memKeys is the number of keys BenchmarkMemory tracks.
const memKeys = 1_000_000

// BenchmarkMemory measures the heap a limiter holds per tracked key at 1M
// keys: runtime.GC and ReadMemStats before, one check on each of 1M new keys
// (each key string freshly built, KeyLen = 16 bytes, one 16-byte
// allocation), runtime.GC and ReadMemStats after, limiter kept alive. The
// deltas therefore include one 16-byte copy of each key, whether the limiter
// keeps the caller's string or its own copy; key-B/key reports it so that
// the limiter's own cost is the difference. Metrics: heapalloc-B/key
// (HeapAlloc delta), heapinuse-B/key (HeapInuse delta, with fragmentation),
// key-B/key. ns/op is the time to track 1M keys (not a hot-path figure).
// Run with -benchtime 1x.
func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()
	libs := []struct {
		name  string
		build func() (check func(string) bool, done func())
	}{
		{"floor", func() (func(string) bool, func()) {
			m := xsync.NewMapOf[string, *atomic.Int64]()
			return func(k string) bool {
				v, _ := m.LoadOrCompute(k, func() *atomic.Int64 { return new(atomic.Int64) })
				return v.Add(1) > 0
			}, func() { runtime.KeepAlive(m) }
		}},
		{"sluice-local", sluiceMem(b, policy.Rule{Name: ruleName, Limit: allowLimit, Window: window, Mode: policy.Local})},
		{"sluice-local-fixed", sluiceMem(b, policy.Rule{Name: ruleName, Limit: allowLimit, Window: window, Mode: policy.Local, Algorithm: policy.FixedWindow})},
		{"sluice-eventual", sluiceMem(b, policy.Rule{Name: ruleName, Limit: allowLimit, Window: window, Mode: policy.Eventual})},
		{"sethvargo", func() (func(string) bool, func()) {
			st, err := memorystore.New(&memorystore.Config{Tokens: allowLimit, Interval: window})
			if err != nil {
				b.Fatal(err)
			}
			return func(k string) bool {
				_, _, _, ok, _ := st.Take(ctx, k)
				return ok
			}, func() { _ = st.Close(ctx) }
		}},
		{"xrate-xsync", func() (func(string) bool, func()) {
			m := xsync.NewMapOf[string, *rate.Limiter]()
			newLim := func() *rate.Limiter {
				return rate.NewLimiter(rate.Limit(float64(allowLimit)/window.Seconds()), allowLimit)
			}
			return func(k string) bool {
				l, _ := m.LoadOrCompute(k, newLim)
				return l.Allow()
			}, func() { runtime.KeepAlive(m) }
		}},
		{"ulule", func() (func(string) bool, func()) {
			lim := ulule.New(ululemem.NewStore(), ulule.Rate{Period: window, Limit: allowLimit})
			return func(k string) bool {
				c, err := lim.Get(ctx, k)
				return err == nil && !c.Reached
			}, func() { runtime.KeepAlive(lim) }
		}},
	}
	for _, lib := range libs {
		b.Run("lib="+lib.name, func(b *testing.B) {
			b.ReportAllocs()
			var alloc, inuse float64
			for i := 0; i < b.N; i++ {
				a, u := measureMem(b, lib.build)
				alloc += a
				inuse += u
			}
			b.ReportMetric(alloc/float64(b.N), "heapalloc-B/key")
			b.ReportMetric(inuse/float64(b.N), "heapinuse-B/key")
			b.ReportMetric(KeyLen, "key-B/key")
		})
	}
}

// sluiceMem builds a sluice limiter with rule for BenchmarkMemory. An
// Eventual rule gets the shared Redis and an idle syncer (SyncInterval 1h):
// its entries then hold what they hold between syncs, and the delta holds
// no pipeline buffers of a sync in flight. Its client is built before the
// first measurement, so its pool is not counted.
func sluiceMem(b *testing.B, rule policy.Rule) func() (func(string) bool, func()) {
	opts := sluice.Options{MaxKeys: 2 * memKeys}
	if rule.Mode == policy.Eventual {
		c := sharedRedis(b).Client(0)
		b.Cleanup(func() { _ = c.Close() })
		opts.Redis, opts.SyncInterval, opts.ErrorBudget = c, time.Hour, 1
	}
	return func() (func(string) bool, func()) {
		opts.Prefix = newPrefix()
		l, err := sluice.New(opts, rule)
		if err != nil {
			panic(err)
		}
		ctx := context.Background()
		return func(k string) bool {
				d, err := l.Allow(ctx, ruleName, k)
				return err == nil && d.Allowed
			}, func() {
				if n := l.Stats().Keys; n != memKeys {
					panic("sluice tracks an unexpected number of keys")
				}
				_ = l.Close()
			}
	}
}

func measureMem(b *testing.B, build func() (func(string) bool, func())) (alloc, inuse float64) {
	b.StopTimer()
	var before, after runtime.MemStats
	gc()
	runtime.ReadMemStats(&before)
	b.StartTimer()
	check, done := build()
	for i := range memKeys {
		if !check(Key(i)) {
			b.Fatalf("key %d denied", i)
		}
	}
	b.StopTimer()
	// Let background goroutines (tickers, sweepers) settle, then collect.
	time.Sleep(10 * time.Millisecond)
	gc()
	runtime.ReadMemStats(&after)
	done()
	runtime.KeepAlive(check)
	gc()
	b.StartTimer()
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / memKeys,
		float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / memKeys
}

func gc() {
	runtime.GC()
	runtime.GC()
}
