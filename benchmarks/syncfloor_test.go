package benchmarks

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkSyncFloor measures what the parts of a key-sync cost Redis with
// nothing around them, against the shared Redis, as the syncer sends them:
// go-redis, one connection, pipelines of 256 commands (or one script call
// for 256 keys), over 10k keys whose Redis keys are named like the syncer's.
// It is the scale for BenchmarkSync's Redis CPU per key-sync: what a push
// and a pull cost at the least, retry-safe or not. Shapes:
//
//	incr            INCR of a string key: the unit
//	hincrby         HINCRBY of the current bucket: a push, not retry-safe
//	hgetall         HGETALL: the bulk path's pull
//	hmget           HMGET of span + 2 buckets: the pull before HGETALL
//	hincrby+hgetall a push and a pull per key: a key-sync, not retry-safe
//	lua-hincrby     one script call per 256 keys that only calls HINCRBY
//	                for each, with the count passed once: the least any
//	                retry-safe push through a script costs
//
// Each runs on keys whose hashes hold one bucket (hash=one) and the window's
// eleven (hash=full). Metrics: redis-cpu-us/key (INFO used_cpu_user +
// used_cpu_sys) and cmd-us/key (INFO commandstats usec of the shape's
// commands).
func BenchmarkSyncFloor(b *testing.B) {
	srv := sharedRedis(b)
	ctx := context.Background()
	const span = 11 // the benchmarks' rule: an hour in 10 sub-windows, weighted oldest
	sub := int64(window/10) / int64(time.Microsecond)
	for _, sh := range floorShapes {
		for _, full := range []bool{false, true} {
			name := "shape=" + sh.name + "/hash=one"
			if full {
				name = "shape=" + sh.name + "/hash=full"
			}
			b.Run(name, func(b *testing.B) {
				c := srv.Client(0)
				defer c.Close()
				if err := floorScript.Load(ctx, c).Err(); err != nil {
					b.Fatal(err)
				}
				t, err := c.Time(ctx).Result()
				if err != nil {
					b.Fatal(err)
				}
				k := t.UnixMicro() / sub
				f := floorArgs{bucket: strconv.FormatInt(k, 10)}
				for j := k - span; j <= k+1; j++ {
					f.window = append(f.window, strconv.FormatInt(j, 10))
				}
				prefix := newPrefix()
				keys := make([]string, 10_000)
				for i := range keys {
					keys[i] = prefix + ":{" + ruleName + ":k%3A" + Key(i)[2:] + "}:" + strconv.FormatInt(sub, 10)
				}
				floorFill(b, c, keys, f, k, full)
				cs0 := mustCommandStats(b, c)
				cpu0 := mustCPU(b, c)
				n := 0
				for b.Loop() {
					for i := 0; i < len(keys); i += 256 {
						p := c.Pipeline()
						sh.batch(ctx, p, keys[i:min(i+256, len(keys))], f)
						if _, err := p.Exec(ctx); err != nil {
							b.Fatal(err)
						}
					}
					n += len(keys)
				}
				cpu1 := mustCPU(b, c)
				cs1 := mustCommandStats(b, c)
				var usec int64
				for _, cmd := range sh.cmds {
					usec += cs1[cmd].Usec - cs0[cmd].Usec
				}
				b.ReportMetric((cpu1-cpu0)*1e6/float64(n), "redis-cpu-us/key")
				b.ReportMetric(float64(usec)/float64(n), "cmd-us/key")
			})
		}
	}
}

// floorArgs are the fields the shapes write and read.
type floorArgs struct {
	bucket string   // the current bucket
	window []string // span + 2 buckets, as the HMGET pull asked for
}

// floorFill gives every key's hash the current bucket and, if full, the
// window's earlier buckets before it, in the order a key's buckets are
// started (a hash this small is a listpack, in the order of its fields: the
// current bucket is the last one), and creates incr's string keys.
func floorFill(b *testing.B, c *redis.Client, keys []string, f floorArgs, k int64, full bool) {
	ctx := context.Background()
	for i := 0; i < len(keys); i += 256 {
		p := c.Pipeline()
		for _, key := range keys[i:min(i+256, len(keys))] {
			args := []any{"hset", key}
			if full {
				for j := k - 10; j < k; j++ {
					args = append(args, strconv.FormatInt(j, 10), 1)
				}
			}
			p.Do(ctx, append(args, f.bucket, 1)...)
			p.Set(ctx, key+":n", 0, 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// floorScript calls HINCRBY for each of KEYS with field ARGV[1] and count
// ARGV[2], and nothing else.
var floorScript = redis.NewScript(`
local f, d = ARGV[1], ARGV[2]
for i = 1, #KEYS do
  redis.call('HINCRBY', KEYS[i], f, d)
end
return 1
`)

var floorShapes = []struct {
	name  string
	cmds  []string // the commandstats entries of the shape (a script's include its calls)
	batch func(ctx context.Context, p redis.Pipeliner, keys []string, f floorArgs)
}{
	{"incr", []string{"incr"}, func(ctx context.Context, p redis.Pipeliner, keys []string, _ floorArgs) {
		for _, k := range keys {
			p.Incr(ctx, k+":n") // a string key beside the hash
		}
	}},
	{"hincrby", []string{"hincrby"}, func(ctx context.Context, p redis.Pipeliner, keys []string, f floorArgs) {
		for _, k := range keys {
			p.HIncrBy(ctx, k, f.bucket, 1)
		}
	}},
	{"hgetall", []string{"hgetall"}, func(ctx context.Context, p redis.Pipeliner, keys []string, _ floorArgs) {
		for _, k := range keys {
			p.HGetAll(ctx, k)
		}
	}},
	{"hmget", []string{"hmget"}, func(ctx context.Context, p redis.Pipeliner, keys []string, f floorArgs) {
		for _, k := range keys {
			p.HMGet(ctx, k, f.window...)
		}
	}},
	{"hincrby+hgetall", []string{"hincrby", "hgetall"}, func(ctx context.Context, p redis.Pipeliner, keys []string, f floorArgs) {
		for _, k := range keys {
			p.HIncrBy(ctx, k, f.bucket, 1)
			p.HGetAll(ctx, k)
		}
	}},
	{"lua-hincrby", []string{"evalsha"}, func(ctx context.Context, p redis.Pipeliner, keys []string, f floorArgs) {
		floorScript.EvalSha(ctx, p, keys, f.bucket, 1)
	}},
}
