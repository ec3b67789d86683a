package benchmarks

import (
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/puzpuzpuz/xsync/v3"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// The key sets of the per-key benchmarks. Each is built on first use, outside
// every timed loop, and its draws are checked by TestDistributions.
var (
	setOnce  = map[string]*sync.Once{"hot": {}, "10k": {}, "1M-zipf": {}, "1M-zipf1.0": {}, "churn": {}}
	setCache sync.Map
	setNames = []string{"hot", "10k", "1M-zipf", "1M-zipf1.0", "churn"}
	// remoteSets are the sets of the checks through Redis: a round trip
	// costs the same whatever the local caches hold, so the flatter Zipf and
	// the churn set would add minutes and nothing else.
	remoteSets = []string{"hot", "10k", "1M-zipf"}
)

func keySet(name string) *KeySet {
	setOnce[name].Do(func() {
		var ks *KeySet
		switch name {
		case "hot":
			ks = Hot()
		case "10k":
			ks = Uniform("10k", 10_000, 20, 1)
		case "1M-zipf":
			ks = Zipf("1M-zipf", ZipfKeys, ZipfS, 22, 2)
		case "1M-zipf1.0":
			ks = Zipf("1M-zipf1.0", ZipfKeys, ZipfFlatS, 22, 3)
		case "churn":
			ks = Churn("churn", ChurnKeys, ChurnLive, 22, 4)
		}
		setCache.Store(name, ks)
	})
	v, _ := setCache.Load(name)
	return v.(*KeySet)
}

// The rule and limits that keep the allow path admitting for as long as a
// benchmark runs (about 4.3e9 per hour per key, with a divergence cap of
// about 2.1e9 for sluice), and the deny path denying (a limit of 1 per hour,
// used up before the timed loop).
const (
	allowLimit = policy.MaxLimit
	denyLimit  = 1
	ruleName   = "api"
	window     = time.Hour
)

// remoteGoroutines is the number of goroutines of a parallel benchmark whose
// checks go to Redis (the redis_rate figures in performance.md use 32).
const remoteGoroutines = 32

// fill runs f on every key with many goroutines, so that limiters whose
// checks go to Redis can be filled in seconds; it fails b on the first error.
func fill(b *testing.B, keys []string, workers int, f func(key string) error) {
	b.Helper()
	if len(keys) == 0 {
		return
	}
	start := time.Now()
	defer func() { b.Logf("filled %d keys in %v", len(keys), time.Since(start).Round(time.Millisecond)) }()
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(keys) || first.Load() != nil {
					return
				}
				if err := f(keys[i]); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		b.Fatal(*e)
	}
}

// remoteDraws is the number of draws the remote benchmarks walk (the first
// ones of the key set's sample): a Redis round trip costs the same whatever
// the local caches hold, and the deny path only has to fill the keys these
// draws reach (store round trips run at thousands per second, too slow to
// fill 1M keys in every run).
const remoteDraws = 1 << 16

// warmPool opens n connections of c's pool before timing.
func warmPool(b *testing.B, c *redis.Client, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Ping(context.Background()).Err(); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
}

// undrawn returns the keys of ks that its sample never draws.
func undrawn(ks *KeySet) []string {
	drawn := make([]bool, len(ks.Keys))
	for _, j := range ks.Idx {
		drawn[j] = true
	}
	var keys []string
	for i, k := range ks.Keys {
		if !drawn[i] {
			keys = append(keys, k)
		}
	}
	return keys
}

// flood makes one check of every key the sample draws, each of which must be
// denied, before the deny path's timed loops: they then measure keys that are
// being flooded, the case the deny path is for. Every library gets it. It
// matters for sluice, whose first denial of a key in a sub-window takes the
// slow path (the estimate and the retry time from the ring) and caches the
// result in the entry; the denials after it read the cache. Without it, the
// 1M-key Zipf loops would meet hundreds of thousands of keys for the first
// time while timing: 256–415 ns per denial serial, against 210–224 ns with it
// (sluice local, three alternating runs).
func flood(b *testing.B, ks *KeySet, check func(key string) (allowed bool, err error)) {
	b.Helper()
	fill(b, ks.Drawn(), 1, func(k string) error {
		ok, err := check(k)
		if err == nil && ok {
			err = fmt.Errorf("key %s admitted while flooding", k)
		}
		return err
	})
}

func wantWord(want bool) string {
	if want {
		return "denied on the allow path"
	}
	return "admitted on the deny path"
}

// BenchmarkCheck measures one per-key check of each in-process limiter, and
// the floor, on every key set, serial and parallel, on the allow path (a key
// far from its limit) and the deny path (a key at its limit). Names:
// set=<key set>/path=<allow|deny>/lib=<limiter>/mode=<serial|parallel>.
//
// sluice-eventual runs with the default 100 ms SyncInterval, the syncer
// pushing what the loop admits; sluice-eventual-idle has SyncInterval 1h
// (the check alone). The deny path is measured with the idle syncer only
// (see benchSluice). The floor has no deny path, and the churn set none
// either: its keys are new, far from any limit.
//
// On the churn set every library starts each run empty and meets the keys in
// the timed loop (see perLeaf). Every loop is metered (cpuMeter:
// bg-cpu-ms/s); sluice eventual also reports its syncer's key-syncs and
// Redis's CPU time per second of the loop (keysyncs/s, redis-cpu-ms/s).
func BenchmarkCheck(b *testing.B) {
	for _, set := range setNames {
		b.Run("set="+set, func(b *testing.B) {
			ks := keySet(set)
			for _, path := range []string{"allow", "deny"} {
				if path == "deny" && ks.Live > 0 {
					continue
				}
				b.Run("path="+path, func(b *testing.B) {
					want := path == "allow"
					if want {
						b.Run("lib=floor", func(b *testing.B) { benchFloor(b, ks) })
						b.Run("lib=floor-api", func(b *testing.B) { benchFloorAPI(b, ks) })
						b.Run("lib=sluice-eventual", func(b *testing.B) { benchSluice(b, ks, want, policy.Eventual, 0, 1) })
					}
					b.Run("lib=sluice-eventual-idle", func(b *testing.B) { benchSluice(b, ks, want, policy.Eventual, time.Hour, 1) })
					b.Run("lib=sluice-local", func(b *testing.B) { benchSluice(b, ks, want, policy.Local, 0, 1) })
					b.Run("lib=sethvargo", func(b *testing.B) { benchSethvargo(b, ks, want) })
					b.Run("lib=xrate-xsync", func(b *testing.B) { benchXRate(b, ks, want) })
					b.Run("lib=ulule", func(b *testing.B) { benchUlule(b, ks, want) })
				})
			}
		})
	}
}

// BenchmarkCheckRemote measures checks that make a Redis round trip each:
// sluice Strict rules and go-redis/redis_rate. Parallel runs use
// remoteGoroutines goroutines.
func BenchmarkCheckRemote(b *testing.B) {
	par := max(1, (remoteGoroutines+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0))
	for _, set := range remoteSets {
		b.Run("set="+set, func(b *testing.B) {
			ks := keySet(set).Head(remoteDraws)
			for _, path := range []string{"allow", "deny"} {
				b.Run("path="+path, func(b *testing.B) {
					want := path == "allow"
					b.Run("lib=sluice-strict", func(b *testing.B) { benchSluice(b, ks, want, policy.Strict, 0, par) })
					b.Run("lib=redis_rate", func(b *testing.B) { benchRedisRate(b, ks, want, par) })
				})
			}
		})
	}
}

// BenchmarkTimeNow is time.Now alone, for scale: a limiter that reads the
// clock on every check pays at least this.
func BenchmarkTimeNow(b *testing.B) {
	b.Run("mode=serial", func(b *testing.B) {
		b.ReportAllocs()
		var t time.Time
		for b.Loop() {
			t = time.Now()
		}
		_ = t
	})
	b.Run("mode=parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var t time.Time
			for pb.Next() {
				t = time.Now()
			}
			_ = t
		})
	})
}

// perLeaf returns how the leaves (mode=serial, mode=parallel) of one
// library's benchmark get their instance. For a churn set: a fresh one at
// each call, built with the leaf's b while its timer is stopped, so that in
// every run the keys appear while timing. Otherwise: one built now with
// parent's b (setup outside every timed loop), shared by the leaves.
func perLeaf[T any](parent *testing.B, ks *KeySet, build func(b *testing.B) T) func(b *testing.B) T {
	if ks.Live > 0 {
		return func(b *testing.B) T {
			b.StopTimer()
			defer b.StartTimer()
			return build(b)
		}
	}
	x := build(parent)
	return func(*testing.B) T { return x }
}

// floorMap is the floor's map: a counter for every key of ks, after a GC;
// for a churn set, an empty map (the loops add the keys as they appear).
func floorMap(ks *KeySet) *xsync.MapOf[string, *atomic.Int64] {
	runtime.GC()
	if ks.Live > 0 {
		return xsync.NewMapOf[string, *atomic.Int64]()
	}
	m := xsync.NewMapOf[string, *atomic.Int64](xsync.WithPresize(len(ks.Keys)))
	for _, k := range ks.Keys {
		m.Store(k, new(atomic.Int64))
	}
	runtime.GC()
	return m
}

// floorNew returns key's counter, adding it: the floor's path for a key it
// meets for the first time (churn). Out of line, so that the loops stay as
// small as a bare load and add.
//
//go:noinline
func floorNew(m *xsync.MapOf[string, *atomic.Int64], key string) *atomic.Int64 {
	v, _ := m.LoadOrCompute(key, func() *atomic.Int64 { return new(atomic.Int64) })
	return v
}

// benchFloor is the floor: an xsync.MapOf load plus one atomic add (on the
// churn set, a load or store).
func benchFloor(b *testing.B, ks *KeySet) {
	get := perLeaf(b, ks, func(*testing.B) *xsync.MapOf[string, *atomic.Int64] { return floorMap(ks) })
	s, mask := ks.Sample, ks.Mask
	b.Run("mode=serial", func(b *testing.B) {
		m := get(b)
		b.ReportAllocs()
		cm := meter(b, true)
		for i := 0; b.Loop(); i++ {
			v, ok := m.Load(s[i&mask])
			if !ok {
				v = floorNew(m, s[i&mask])
			}
			if v.Add(1) <= 0 {
				b.Fatal("floor overflowed")
			}
		}
		cm.report()
	})
	b.Run("mode=parallel", func(b *testing.B) {
		m := get(b)
		b.ReportAllocs()
		var g atomic.Uint64
		cm := meter(b, false)
		b.RunParallel(func(pb *testing.PB) {
			defer cm.loop()()
			i := ks.Start(g.Add(1))
			for pb.Next() {
				v, ok := m.Load(s[i&mask])
				if !ok {
					v = floorNew(m, s[i&mask])
				}
				if v.Add(1) <= 0 {
					b.Error("floor overflowed")
					return
				}
				i++
			}
		})
		cm.report()
	})
}

// floorAPI is the floor behind sluice's API: the same map load and atomic
// add, in a method with Limiter.AllowN's signature that returns a Decision.
// It prices the API contract itself. Decision has five fields, one more than
// the Go compiler keeps in registers (ssa: at most 4 fields per struct), so
// every caller stores the returned fields to the stack and copies them with
// 16-byte moves that span two 8-byte stores: a store-forwarding stall of a
// few ns per call on amd64, whatever the limiter does inside (benchmarks/HISTORY.md).
// Not inlined, like AllowN, which is far over the inlining budget.
type floorAPI struct {
	m *xsync.MapOf[string, *atomic.Int64]
}

//go:noinline
func (f *floorAPI) AllowN(_ context.Context, _, key string, n int64) (sluice.Decision, error) {
	v, ok := f.m.Load(key)
	if !ok {
		v = floorNew(f.m, key)
	}
	return sluice.Decision{Allowed: true, Limit: allowLimit, Remaining: allowLimit - v.Add(n), ResetAfter: window}, nil
}

// benchFloorAPI measures floorAPI with benchSluice's loops (allow path).
func benchFloorAPI(b *testing.B, ks *KeySet) {
	get := perLeaf(b, ks, func(*testing.B) *floorAPI { return &floorAPI{m: floorMap(ks)} })
	ctx := context.Background()
	s, mask := ks.Sample, ks.Mask
	b.Run("mode=serial", func(b *testing.B) {
		f := get(b)
		b.ReportAllocs()
		cm := meter(b, true)
		for i := 0; b.Loop(); i++ {
			if d, err := f.AllowN(ctx, ruleName, s[i&mask], 1); !d.Allowed || err != nil {
				b.Fatalf("%s: %+v, %v", s[i&mask], d, err)
			}
		}
		cm.report()
	})
	b.Run("mode=parallel", func(b *testing.B) {
		f := get(b)
		b.ReportAllocs()
		var g atomic.Uint64
		cm := meter(b, false)
		defer cm.report()
		b.RunParallel(func(pb *testing.PB) {
			defer cm.loop()()
			i := ks.Start(g.Add(1))
			for pb.Next() {
				if d, err := f.AllowN(ctx, ruleName, s[i&mask], 1); !d.Allowed || err != nil {
					b.Errorf("%s: %+v, %v", s[i&mask], d, err)
					return
				}
				i++
			}
		})
	})
}

// benchSluice measures Limiter.Allow for a rule in mode. Eventual and Strict
// rules get a real Redis; syncEvery 0 is the default SyncInterval (the
// syncer runs in the background during the benchmark). On the allow path
// the error budget is 1 and the limit policy.MaxLimit, so Eventual checks
// stay local. On the deny path every key the timed loops can draw is at its
// limit before timing.
//
// Setup, per mode, all through the public API:
//   - Local, allow and deny: one check on every key (deny: Limit 1, so that
//     check fills it; then flood).
//   - Eventual, allow: one check on every key, then Flush, so that the
//     timed loops start from a synced steady state (with the default
//     interval the syncer then syncs, in the background, whatever the loops
//     admit).
//   - Eventual, deny (only with an idle syncer): Limit 2, so the divergence
//     cap is ⌊1·2/(1+1)⌋ = 1 and both units can be admitted locally: one
//     check on every key the sample draws, Flush (the totals come back as
//     1), one more check on each of them. Those keys are then full (1
//     synced + 1 pending) and every check of them is denied locally; the
//     syncer is idle (SyncInterval 1h), so nothing moves while timing. The
//     set's other keys are then tracked with one check each (never synced,
//     never checked again), and the drawn keys flooded. Filling through the
//     store instead would take one reservation per key, which runs at a few
//     thousand per second.
//   - Strict: every check is a store round trip. Allow: nothing to warm.
//     Deny: Limit 1, and one check on every key the remote sample draws
//     (see remoteDraws), concurrently so that the syncer batches them.
//   - Churn set (allow path, Local and Eventual): nothing; every run gets
//     a fresh limiter (perLeaf) whose keys appear in the timed loop.
func benchSluice(b *testing.B, ks *KeySet, want bool, mode policy.Mode, syncEvery time.Duration, par int) {
	type inst struct {
		l *sluice.Limiter
		c *redis.Client // nil for Local
	}
	get := perLeaf(b, ks, func(b *testing.B) inst {
		l, c := newSluice(b, ks, want, mode, syncEvery)
		return inst{l, c}
	})
	if mode == policy.Strict {
		benchStrict(b, get(b).l, ks, want, par)
		return
	}
	ctx := context.Background()
	s, mask := ks.Sample, ks.Mask
	syncing := mode == policy.Eventual && syncEvery < time.Hour
	b.Run("mode=serial", func(b *testing.B) {
		in := get(b)
		l := in.l
		b.ReportAllocs()
		sm := startSyncMeter(b, in.l, in.c, syncing)
		cm := meter(b, true)
		timed(func() {
			for i := 0; b.Loop(); i++ {
				if d, err := l.Allow(ctx, ruleName, s[i&mask]); d.Allowed != want || err != nil {
					b.Fatalf("%s: %s (%+v, %v)", s[i&mask], wantWord(want), d, err)
				}
			}
		})
		cm.report()
		sm.report()
	})
	b.Run("mode=parallel", func(b *testing.B) {
		in := get(b)
		l := in.l
		b.ReportAllocs()
		b.SetParallelism(par)
		var g atomic.Uint64
		b.StopTimer()
		sm := startSyncMeter(b, in.l, in.c, syncing)
		b.StartTimer()
		cm := meter(b, false)
		timed(func() {
			b.RunParallel(func(pb *testing.PB) {
				defer cm.loop()()
				i := ks.Start(g.Add(1))
				for pb.Next() {
					if d, err := l.Allow(ctx, ruleName, s[i&mask]); d.Allowed != want || err != nil {
						b.Errorf("%s: %s (%+v, %v)", s[i&mask], wantWord(want), d, err)
						return
					}
					i++
				}
			})
		})
		cm.report()
		b.StopTimer()
		sm.report()
		b.StartTimer()
	})
}

// newSluice builds and fills the limiter benchSluice measures (see there);
// b's cleanups close it and empty the Redis it used. On a churn set it
// tracks no key: they appear in the timed loops.
func newSluice(b *testing.B, ks *KeySet, want bool, mode policy.Mode, syncEvery time.Duration) (*sluice.Limiter, *redis.Client) {
	runtime.GC()
	opts := sluice.Options{ErrorBudget: 1, SyncInterval: syncEvery, MaxKeys: 2 * len(ks.Keys)}
	var c *redis.Client
	if mode != policy.Local {
		srv := sharedRedis(b)
		c = srv.Client(4 * remoteGoroutines)
		opts.Redis, opts.Prefix = c, newPrefix()
		warmPool(b, c, 2*remoteGoroutines)
		// Runs last: the next benchmark starts on an empty Redis, as the
		// first one did (a 1M-key set leaves some 350 MB behind, and a
		// larger keyspace makes every later command dearer).
		b.Cleanup(func() { flushRedis(b, srv) })
	}
	rule := policy.Rule{Name: ruleName, Limit: allowLimit, Window: window, Mode: mode}
	if !want {
		rule.Limit = 1
		if mode == policy.Eventual {
			rule.Limit = 2
		}
	}
	l, err := sluice.New(opts, rule)
	if err != nil {
		b.Fatal(err)
	}
	// Cleanups run last-in first-out: the client is closed before the
	// limiter, so that Close does not spend half a minute pushing the
	// counts of up to 1M keys that the next benchmark does not need.
	b.Cleanup(func() { _ = l.Close() })
	if c != nil {
		b.Cleanup(func() { _ = c.Close() })
	}
	if ks.Live > 0 {
		runtime.GC()
		return l, c
	}
	ctx := context.Background()
	admit := func(k string) error {
		d, err := l.Allow(ctx, ruleName, k)
		if err == nil && !d.Allowed {
			err = fmt.Errorf("key %s denied while filling: %+v", k, d)
		}
		return err
	}
	allowed := func(k string) (bool, error) {
		d, err := l.Allow(ctx, ruleName, k)
		return d.Allowed, err
	}
	flush := func() {
		start := time.Now()
		if err := l.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		b.Logf("flushed in %v", time.Since(start).Round(time.Millisecond))
	}
	switch {
	case mode == policy.Local:
		fill(b, ks.Keys, 1, admit)
		if !want {
			flood(b, ks, allowed)
		}
	case mode == policy.Eventual && want:
		fill(b, ks.Keys, 1, admit)
		if syncEvery < time.Hour {
			flush()
		}
	case mode == policy.Eventual:
		if syncEvery < time.Hour {
			b.Fatal("the Eventual deny path is set up with an idle syncer only")
		}
		// Only the keys the sample draws are filled (and so synced); the
		// others are tracked afterwards, pending and never synced: the idle
		// syncer never pushes them and the loops never check them.
		drawn := ks.Drawn()
		fill(b, drawn, 1, admit)
		flush()
		fill(b, drawn, 1, admit)
		fill(b, undrawn(ks), 1, admit)
		flood(b, ks, allowed)
	case mode == policy.Strict && !want:
		fill(b, ks.Drawn(), 256, func(k string) error {
			// A reservation that times out under the fill's load is decided
			// by the failure mode, which may deny a fresh key: retry it.
			var err error
			for range 5 {
				if err = admit(k); err == nil {
					return nil
				}
				time.Sleep(10 * time.Millisecond)
			}
			return err
		})
		flush()
	}
	runtime.GC()
	return l, c
}

// flushRedis empties the shared Redis (FLUSHALL) with a client of its own.
func flushRedis(b *testing.B, srv *Redis) {
	c := srv.Client(1)
	defer c.Close()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		b.Errorf("emptying Redis after the benchmark: %v", err)
	}
}

// syncMeter measures, around a loop of sluice eventual with its syncer
// running, the key-syncs its syncer made (Stats) and the CPU time Redis
// spent (INFO cpu), per second of wall time: keysyncs/s, redis-cpu-ms/s.
type syncMeter struct {
	b     *testing.B
	l     *sluice.Limiter
	c     *redis.Client
	start time.Time
	ks    int64
	cpu   float64
}

// startSyncMeter starts a syncMeter; nil (which reports nothing) unless on.
func startSyncMeter(b *testing.B, l *sluice.Limiter, c *redis.Client, on bool) *syncMeter {
	if !on || c == nil {
		return nil
	}
	cpu, err := CPUSeconds(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	return &syncMeter{b: b, l: l, c: c, start: time.Now(), ks: l.Stats().Sync.KeySyncs, cpu: cpu}
}

func (m *syncMeter) report() {
	if m == nil {
		return
	}
	sec := time.Since(m.start).Seconds()
	ks := m.l.Stats().Sync.KeySyncs - m.ks
	cpu, err := CPUSeconds(context.Background(), m.c)
	if err != nil {
		m.b.Fatal(err)
	}
	m.b.ReportMetric(float64(ks)/sec, "keysyncs/s")
	m.b.ReportMetric((cpu-m.cpu)*1e3/sec, "redis-cpu-ms/s")
}

// timed runs f with the pprof label phase=timed, which the goroutines it
// starts inherit: `go tool pprof -tagfocus=phase=timed` then shows the checks
// alone, without the setup and the background goroutines (syncer, ticker,
// sweeper), which a plain profile includes.
func timed(f func()) {
	pprof.Do(context.Background(), pprof.Labels("phase", "timed"), func(context.Context) { f() })
}

// odd counts the checks of a remote benchmark that were not decided as the
// path expects (or failed). A check through the store that takes longer than
// sluice's Timeout (50 ms by default, easily reached by 32 goroutines on a
// loaded 2-core machine) is decided by the failure mode instead, which can
// deny a key far from its limit; that is a finding to report, not a reason to
// throw the run away. The metric unexpected/op is the fraction of such checks.
type odd struct {
	n     atomic.Int64
	first atomic.Pointer[string]
}

func (o *odd) note(what string) {
	if o.n.Add(1) == 1 {
		o.first.Store(&what)
	}
}

func (o *odd) report(b *testing.B) {
	n := o.n.Load()
	b.ReportMetric(float64(n)/float64(b.N), "unexpected/op")
	if f := o.first.Load(); f != nil {
		b.Logf("%d of %d checks not decided as expected; first: %s", n, b.N, *f)
	}
}

// benchStrict is benchSluice's loops for Strict rules, which go to Redis.
func benchStrict(b *testing.B, l *sluice.Limiter, ks *KeySet, want bool, par int) {
	ctx := context.Background()
	s, mask := ks.Sample, ks.Mask
	b.Run("mode=serial", func(b *testing.B) {
		b.ReportAllocs()
		var o odd
		for i := 0; b.Loop(); i++ {
			if d, err := l.Allow(ctx, ruleName, s[i&mask]); d.Allowed != want || err != nil {
				o.note(fmt.Sprintf("%s: %s (%+v, %v)", s[i&mask], wantWord(want), d, err))
			}
		}
		o.report(b)
	})
	b.Run("mode=parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(par)
		var o odd
		var g atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			i := ks.Start(g.Add(1))
			for pb.Next() {
				if d, err := l.Allow(ctx, ruleName, s[i&mask]); d.Allowed != want || err != nil {
					o.note(fmt.Sprintf("%s: %s (%+v, %v)", s[i&mask], wantWord(want), d, err))
				}
				i++
			}
		})
		o.report(b)
	})
}

// benchSethvargo measures github.com/sethvargo/go-limiter's memorystore (a
// token bucket per key behind one RWMutex-guarded map).
func benchSethvargo(b *testing.B, ks *KeySet, want bool) {
	runStore(b, ks, want, perLeaf(b, ks, func(b *testing.B) limiter.Store { return newSethvargo(b, ks, want) }))
}

// newSethvargo builds and fills the store benchSethvargo measures (on a
// churn set, empty).
func newSethvargo(b *testing.B, ks *KeySet, want bool) limiter.Store {
	runtime.GC()
	cfg := &memorystore.Config{Tokens: allowLimit, Interval: window}
	if !want {
		cfg.Tokens = denyLimit
	}
	st, err := memorystore.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close(context.Background()) })
	if ks.Live > 0 {
		return st
	}
	ctx := context.Background()
	for _, k := range ks.Keys {
		if _, _, _, ok, err := st.Take(ctx, k); !ok || err != nil {
			b.Fatalf("fill %s: %v %v", k, ok, err)
		}
	}
	if !want {
		flood(b, ks, func(k string) (bool, error) {
			_, _, _, ok, err := st.Take(ctx, k)
			return ok, err
		})
	}
	runtime.GC()
	return st
}

// runStore is split out so the loops call the concrete store's method
// through the limiter.Store interface, as its users do.
func runStore(b *testing.B, ks *KeySet, want bool, get func(*testing.B) limiter.Store) {
	ctx := context.Background()
	s, mask := ks.Sample, ks.Mask
	b.Run("mode=serial", func(b *testing.B) {
		st := get(b)
		b.ReportAllocs()
		cm := meter(b, true)
		for i := 0; b.Loop(); i++ {
			if _, _, _, ok, err := st.Take(ctx, s[i&mask]); ok != want || err != nil {
				b.Fatalf("%s: %s (%v)", s[i&mask], wantWord(want), err)
			}
		}
		cm.report()
	})
	b.Run("mode=parallel", func(b *testing.B) {
		st := get(b)
		b.ReportAllocs()
		var g atomic.Uint64
		cm := meter(b, false)
		defer cm.report()
		b.RunParallel(func(pb *testing.PB) {
			defer cm.loop()()
			i := ks.Start(g.Add(1))
			for pb.Next() {
				if _, _, _, ok, err := st.Take(ctx, s[i&mask]); ok != want || err != nil {
					b.Errorf("%s: %s (%v)", s[i&mask], wantWord(want), err)
					return
				}
				i++
			}
		})
	})
}

// benchXRate measures golang.org/x/time/rate with one *rate.Limiter per key
// in an xsync.MapOf (the same map as the floor and sluice, so that the
// difference is the limiter). The rate is finite (a limit of rate.Inf would
// skip the arithmetic); Allow reads time.Now on every call.
func benchXRate(b *testing.B, ks *KeySet, want bool) {
	newLim := func() *rate.Limiter {
		if want {
			return rate.NewLimiter(rate.Limit(float64(allowLimit)/window.Seconds()), allowLimit)
		}
		return rate.NewLimiter(rate.Every(window), denyLimit)
	}
	type xrate = func(k string) *rate.Limiter
	mk := perLeaf(b, ks, func(b *testing.B) xrate {
		runtime.GC()
		var m *xsync.MapOf[string, *rate.Limiter]
		if ks.Live > 0 {
			m = xsync.NewMapOf[string, *rate.Limiter]()
		} else {
			m = xsync.NewMapOf[string, *rate.Limiter](xsync.WithPresize(len(ks.Keys)))
		}
		get := func(k string) *rate.Limiter {
			if l, ok := m.Load(k); ok {
				return l
			}
			l, _ := m.LoadOrCompute(k, newLim)
			return l
		}
		if ks.Live > 0 {
			return get
		}
		for _, k := range ks.Keys {
			if !get(k).Allow() {
				b.Fatalf("fill %s denied", k)
			}
		}
		if !want {
			flood(b, ks, func(k string) (bool, error) { return get(k).Allow(), nil })
		}
		runtime.GC()
		return get
	})
	s, mask := ks.Sample, ks.Mask
	b.Run("mode=serial", func(b *testing.B) {
		get := mk(b)
		b.ReportAllocs()
		cm := meter(b, true)
		for i := 0; b.Loop(); i++ {
			if get(s[i&mask]).Allow() != want {
				b.Fatalf("%s: %s", s[i&mask], wantWord(want))
			}
		}
		cm.report()
	})
	b.Run("mode=parallel", func(b *testing.B) {
		get := mk(b)
		b.ReportAllocs()
		var g atomic.Uint64
		cm := meter(b, false)
		defer cm.report()
		b.RunParallel(func(pb *testing.PB) {
			defer cm.loop()()
			i := ks.Start(g.Add(1))
			for pb.Next() {
				if get(s[i&mask]).Allow() != want {
					b.Errorf("%s: %s", s[i&mask], wantWord(want))
					return
				}
				i++
			}
		})
	})
}

// benchUlule measures github.com/ulule/limiter/v3 with its memory store (a
// fixed-window counter per key).
func benchUlule(b *testing.B, ks *KeySet, want bool) {
	r := ulule.Rate{Period: window, Limit: allowLimit}
	if !want {
		r.Limit = denyLimit
	}
	ctx := context.Background()
	mk := perLeaf(b, ks, func(b *testing.B) *ulule.Limiter {
		runtime.GC()
		lim := ulule.New(ululemem.NewStore(), r)
		if ks.Live > 0 {
			return lim
		}
		for _, k := range ks.Keys {
			if c, err := lim.Get(ctx, k); c.Reached || err != nil {
				b.Fatalf("fill %s: %+v %v", k, c, err)
			}
		}
		if !want {
			flood(b, ks, func(k string) (bool, error) {
				c, err := lim.Get(ctx, k)
				return !c.Reached, err
			})
		}
		runtime.GC()
		return lim
	})
	s, mask := ks.Sample, ks.Mask
	b.Run("mode=serial", func(b *testing.B) {
		lim := mk(b)
		b.ReportAllocs()
		cm := meter(b, true)
		for i := 0; b.Loop(); i++ {
			if c, err := lim.Get(ctx, s[i&mask]); c.Reached == want || err != nil {
				b.Fatalf("%s: %s (%v)", s[i&mask], wantWord(want), err)
			}
		}
		cm.report()
	})
	b.Run("mode=parallel", func(b *testing.B) {
		lim := mk(b)
		b.ReportAllocs()
		var g atomic.Uint64
		cm := meter(b, false)
		defer cm.report()
		b.RunParallel(func(pb *testing.PB) {
			defer cm.loop()()
			i := ks.Start(g.Add(1))
			for pb.Next() {
				if c, err := lim.Get(ctx, s[i&mask]); c.Reached == want || err != nil {
					b.Errorf("%s: %s (%v)", s[i&mask], wantWord(want), err)
					return
				}
				i++
			}
		})
	})
}

// benchRedisRate measures github.com/go-redis/redis_rate/v10 (GCRA in a Lua
// script, one round trip per check) on the shared Redis.
func benchRedisRate(b *testing.B, ks *KeySet, want bool, par int) {
	runtime.GC()
	srv := sharedRedis(b)
	c := srv.Client(4 * remoteGoroutines)
	b.Cleanup(func() { _ = c.Close() })
	warmPool(b, c, 2*remoteGoroutines)
	lim := redis_rate.NewLimiter(c)
	limit := redis_rate.Limit{Rate: allowLimit, Burst: allowLimit, Period: window}
	if !want {
		limit = redis_rate.Limit{Rate: denyLimit, Burst: denyLimit, Period: window}
	}
	prefix := newPrefix() + ":"
	ctx := context.Background()
	if !want {
		// Only the deny path needs the keys used up first; on the allow path
		// redis_rate keeps no state worth warming (one string per key).
		fill(b, ks.Drawn(), 4*remoteGoroutines, func(k string) error {
			res, err := lim.Allow(ctx, prefix+k, limit)
			if err == nil && res.Allowed != 1 {
				err = fmt.Errorf("key %s denied while filling", k)
			}
			return err
		})
	}
	// The prefixed keys are built here, outside the timed loops.
	s := make([]string, len(ks.Sample))
	keys := make(map[string]string, len(ks.Keys))
	for i, k := range ks.Sample {
		p, ok := keys[k]
		if !ok {
			p = prefix + k
			keys[k] = p
		}
		s[i] = p
	}
	mask := ks.Mask
	b.Run("mode=serial", func(b *testing.B) {
		b.ReportAllocs()
		var o odd
		for i := 0; b.Loop(); i++ {
			if res, err := lim.Allow(ctx, s[i&mask], limit); err != nil || (res.Allowed == 1) != want {
				o.note(fmt.Sprintf("%s: %s (%v)", s[i&mask], wantWord(want), err))
			}
		}
		o.report(b)
	})
	b.Run("mode=parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(par)
		var o odd
		var g atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			i := ks.Start(g.Add(1))
			for pb.Next() {
				if res, err := lim.Allow(ctx, s[i&mask], limit); err != nil || (res.Allowed == 1) != want {
					o.note(fmt.Sprintf("%s: %s (%v)", s[i&mask], wantWord(want), err))
				}
				i++
			}
		})
		o.report(b)
	})
}
