package benchmarks

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/keyname"
	"github.com/sluicehq/sluice/policy"
)

// syncSizes are the dirty keys per cycle of BenchmarkSync.
var syncSizes = []int{1_000, 10_000, 100_000}

// BenchmarkSync measures the syncer against the shared Redis, through the
// public API only: each iteration admits once on N keys (untimed; the
// SyncInterval is an hour, so nothing syncs by itself) and then times
// Limiter.Flush, one full cycle that pushes and pulls every dirty key. ns/op
// is the cycle latency. Metrics:
//
//	keysyncs/s       key-syncs (one key pushed and pulled) per second of Flush
//	keysyncs/cycle   key-syncs per cycle (N, plus any follow-up pulls)
//	roundtrips/cycle pipelines and single calls per cycle
//	cmds/keysync     commands the syncer sent per key-sync (heartbeat included)
//	redis-cmds/keysync  commands Redis processed per key-sync (INFO stats)
//	bytes/keysync    Redis network bytes in + out per key-sync (INFO stats)
//	redis-B/key      Redis used_memory per new tracked key (first cycle)
//	redis-cpu-us/keysync  Redis CPU time (INFO cpu, user+sys) per key-sync
//	lastcycle-ms     the syncer's own LastCycle of the last iteration
//	<cmd>-us/keysync  Redis time in one command per key-sync (INFO
//	                 commandstats usec; a script's includes the commands it
//	                 calls, which are reported on their own too)
//	<cmd>-calls/keysync  calls of that command per key-sync
//
// The keys' hashes hold one bucket each (the window is an hour, so the
// cycles all fall into one bucket), and each key is admitted once per cycle.
// dirty=10k,full first fills every key's hash with counts in each earlier
// bucket of the window, as a key busy for a whole window has them: then every
// pull reads a full hash. dirty=10k,counts admits key i 1 + i mod 256 times
// per cycle: a pipeline's keys have nearly as many different counts as keys.
func BenchmarkSync(b *testing.B) {
	srv := sharedRedis(b)
	for _, n := range syncSizes {
		b.Run("dirty="+human(n), func(b *testing.B) { benchSync(b, srv, n, syncCase{}) })
	}
	b.Run("dirty=10k,full", func(b *testing.B) { benchSync(b, srv, 10_000, syncCase{full: true}) })
	b.Run("dirty=10k,counts", func(b *testing.B) { benchSync(b, srv, 10_000, syncCase{counts: true}) })
}

// syncCase is a variant of benchSync.
type syncCase struct {
	full   bool // every hash holds the window's earlier buckets
	counts bool // key i is admitted 1 + i%256 times per cycle, not once
}

// fillWindow gives each of keys (Redis key names of rule) a count of 1 in
// every bucket of the window before the current one.
func fillWindow(b *testing.B, c *redis.Client, rule policy.Rule, keys []string) {
	ctx := context.Background()
	t, err := c.Time(ctx).Result()
	if err != nil {
		b.Fatal(err)
	}
	prec := rule.Precision
	if prec == 0 {
		prec = policy.DefaultPrecision
	}
	sub := rule.Window / time.Duration(prec)
	k := t.UnixNano() / int64(sub)
	for i := 0; i < len(keys); i += 256 {
		p := c.Pipeline()
		for _, key := range keys[i:min(i+256, len(keys))] {
			args := []any{"hset", key}
			for j := k - int64(prec); j < k; j++ {
				args = append(args, strconv.FormatInt(j, 10), 1)
			}
			p.Do(ctx, args...)
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func benchSync(b *testing.B, srv *Redis, n int, sc syncCase) {
	ctx := context.Background()
	c := srv.Client(0)
	defer c.Close()
	rule := policy.Rule{Name: ruleName, Limit: allowLimit, Window: window}
	prefix := newPrefix()
	l, err := sluice.New(sluice.Options{Redis: c, Prefix: prefix, SyncInterval: time.Hour, ErrorBudget: 1, MaxKeys: 2 * n}, rule)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = Key(i)
	}
	if sc.full {
		// the layout of the syncer's Rule.keyName: "<prefix>:{<rule>:<key>}:<sub-window µs>".
		sub := strconv.FormatInt(int64(window/policy.DefaultPrecision/time.Microsecond), 10)
		names := make([]string, n)
		for i, k := range keys {
			names[i] = prefix + ":{" + rule.Name + ":" + string(keyname.Encode(nil, k)) + "}:" + sub
		}
		fillWindow(b, c, rule, names)
	}
	admit := func() {
		for i, k := range keys {
			units := int64(1)
			if sc.counts {
				units += int64(i % 256)
			}
			if d, err := l.AllowN(ctx, ruleName, k, units); !d.Allowed || err != nil {
				b.Fatalf("%s denied: %v", k, err)
			}
		}
	}
	flush := func() {
		if err := l.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// First cycle: n new keys in Redis.
	mem0 := mustInfoInt(b, c, "memory", "used_memory")
	admit()
	flush()
	mem1 := mustInfoInt(b, c, "memory", "used_memory")
	flush() // the follow-up pull of the first cycle: start from the steady state
	infoCost := netCost(b, c)

	st0 := l.Stats().Sync
	net0 := mustNetBytes(b, c)
	cmd0 := mustInfoInt(b, c, "stats", "total_commands_processed")
	cpu0 := mustCPU(b, c)
	cs0 := mustCommandStats(b, c)
	cycles := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		admit()
		b.StartTimer()
		flush()
		cycles++
	}
	cs1 := mustCommandStats(b, c)
	cpu1 := mustCPU(b, c)
	cmd1 := mustInfoInt(b, c, "stats", "total_commands_processed")
	net1 := mustNetBytes(b, c)
	st1 := l.Stats().Sync

	ks := float64(st1.KeySyncs - st0.KeySyncs)
	if ks == 0 {
		b.Fatal("no key-syncs counted")
	}
	b.ReportMetric(ks/b.Elapsed().Seconds(), "keysyncs/s")
	b.ReportMetric(ks/float64(cycles), "keysyncs/cycle")
	b.ReportMetric(float64(st1.RoundTrips-st0.RoundTrips)/float64(cycles), "roundtrips/cycle")
	b.ReportMetric(float64(st1.Commands-st0.Commands)/ks, "cmds/keysync")
	// cmd1 counts the INFO that read it: one command not from the syncer.
	b.ReportMetric(float64(cmd1-cmd0-1)/ks, "redis-cmds/keysync")
	b.ReportMetric(float64(net1-net0-infoCost)/ks, "bytes/keysync")
	if !sc.full { // the hashes existed before
		b.ReportMetric(float64(mem1-mem0)/float64(n), "redis-B/key")
	}
	b.ReportMetric((cpu1-cpu0)*1e6/ks, "redis-cpu-us/keysync")
	b.ReportMetric(float64(st1.LastCycle.Microseconds())/1000, "lastcycle-ms")
	for name, st := range cs1 {
		d := CommandStat{st.Calls - cs0[name].Calls, st.Usec - cs0[name].Usec}
		if d.Calls == 0 || name == "info" || float64(d.Usec)/ks < 0.02 {
			continue // the heartbeat's and the INFO calls'
		}
		name = strings.ReplaceAll(name, "|", "-")
		b.ReportMetric(float64(d.Usec)/ks, name+"-us/keysync")
		b.ReportMetric(float64(d.Calls)/ks, name+"-calls/keysync")
	}
	if st1.Failures != st0.Failures {
		b.Fatalf("%d failed round trips during the benchmark", st1.Failures-st0.Failures)
	}
}

func mustCommandStats(b *testing.B, c *redis.Client) map[string]CommandStat {
	m, err := CommandStats(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func mustCPU(b *testing.B, c *redis.Client) float64 {
	v, err := CPUSeconds(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// netCost is what one INFO stats call adds to the network counters (its
// request and its reply), to subtract from a delta taken with two of them.
func netCost(b *testing.B, c *redis.Client) int64 {
	x := mustNetBytes(b, c)
	y := mustNetBytes(b, c)
	return y - x
}

func mustNetBytes(b *testing.B, c *redis.Client) int64 {
	v, err := NetBytes(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

func mustInfoInt(b *testing.B, c *redis.Client, section, field string) int64 {
	v, err := InfoInt(context.Background(), c, section, field)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// BenchmarkRedisINCR runs redis-benchmark INCR against the shared Redis, in
// the same process and run as BenchmarkSync, as the scale for key-syncs/s:
// pipelined 64 deep (-P 64) and unpipelined. Metrics ops/s and
// redis-cpu-us/op (Redis CPU time per INCR, from INFO cpu). goredis-P=256
// sends the INCRs as the syncer sends its commands: through go-redis, one
// connection, pipelines of 256, over 10k keys.
func BenchmarkRedisINCR(b *testing.B) {
	srv := sharedRedis(b)
	c := srv.Client(0)
	defer c.Close()
	b.Run("goredis-P=256", func(b *testing.B) {
		const batch = 256
		const n = 4096 * batch
		ctx := context.Background()
		keys := make([]string, 10_000)
		prefix := newPrefix()
		for i := range keys {
			keys[i] = prefix + ":" + Key(i)
		}
		var sum, cpu float64
		for i := 0; i < b.N; i++ {
			cpu0 := mustCPU(b, c)
			start := time.Now()
			for done := 0; done < n; done += batch {
				p := c.Pipeline()
				for j := done; j < done+batch; j++ {
					p.Incr(ctx, keys[j%len(keys)])
				}
				if _, err := p.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
			sum += float64(n) / time.Since(start).Seconds()
			cpu += mustCPU(b, c) - cpu0
		}
		b.ReportMetric(sum/float64(b.N), "ops/s")
		b.ReportMetric(cpu*1e6/float64(b.N*n), "redis-cpu-us/op")
	})
	for _, v := range []struct {
		name string
		n    int
		args []string
	}{
		{"P=64", 1_000_000, []string{"-t", "incr", "-P", "64"}},
		{"P=1", 100_000, []string{"-t", "incr"}},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			var sum, cpu float64
			for i := 0; i < b.N; i++ {
				cpu0 := mustCPU(b, c)
				ops, line, err := srv.RedisBenchmark(context.Background(), append(v.args, "-n", strconv.Itoa(v.n))...)
				if err != nil {
					b.Fatal(err)
				}
				cpu += mustCPU(b, c) - cpu0
				if i == 0 {
					b.Log(line)
				}
				sum += ops
			}
			b.ReportMetric(sum/float64(b.N), "ops/s")
			b.ReportMetric(cpu*1e6/float64(b.N*v.n), "redis-cpu-us/op")
		})
	}
}
