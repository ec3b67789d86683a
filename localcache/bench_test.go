package localcache

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

var benchGeo = window.NewSliding(time.Minute, 10)

// benchTable returns a ticked table with a limit no benchmark exhausts.
func benchTable(tb testing.TB, eventual bool, limit int64) *Table {
	t, err := New(Config{Geometry: benchGeo, Limit: limit, Eventual: eventual, ByNeed: eventual, Keys: NewKeys(1 << 20)})
	require.NoError(tb, err)
	t.tick(base)
	return t
}

// TestAllowDoesNotAllocate: the fast path (existing key, valid budget) and the
// bucket's first check on an existing key do not allocate. Not parallel:
// AllocsPerRun counts every goroutine's allocations (and refuses to run in a
// parallel test); sequential tests run before the parallel ones start.
func TestAllowDoesNotAllocate(t *testing.T) {
	for _, eventual := range []bool{false, true} {
		t.Run(fmt.Sprintf("eventual=%v", eventual), func(t *testing.T) {
			tb := benchTable(t, eventual, maxCount/4)
			require.Equal(t, verdict.Allowed, tb.Allow("hot", 1).Status) // creates the key and its budget
			require.Zero(t, testing.AllocsPerRun(1000, func() { tb.Allow("hot", 1) }), "Allow")
			require.Zero(t, testing.AllocsPerRun(1000, func() { tb.AllowAt("hot", base, 1) }), "AllowAt")
			now := base
			require.Zero(t, testing.AllocsPerRun(100, func() {
				now += benchGeo.Sub() // a new bucket every time: the slow path
				tb.AllowAt("hot", now, 1)
			}), "slow path")
		})
	}
}

func BenchmarkAllowHotKey(b *testing.B) {
	for _, eventual := range []bool{false, true} {
		name := "local"
		if eventual {
			name = "eventual"
		}
		b.Run(name+"/serial", func(b *testing.B) {
			tb := benchTable(b, eventual, maxCount/4)
			b.ReportAllocs()
			for b.Loop() {
				tb.Allow("hot", 1)
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			tb := benchTable(b, eventual, maxCount/4)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tb.Allow("hot", 1)
				}
			})
		})
	}
}

func BenchmarkAllow10kKeys(b *testing.B) {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%08d", i)
	}
	warm := func(b *testing.B) *Table {
		tb := benchTable(b, false, maxCount/4)
		for _, k := range keys {
			tb.Allow(k, 1)
		}
		return tb
	}
	b.Run("serial", func(b *testing.B) {
		tb := warm(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			tb.Allow(keys[i], 1)
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		tb := warm(b)
		b.ResetTimer()
		var seq atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1)*7919) % len(keys)
			for pb.Next() {
				tb.Allow(keys[i], 1)
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
	})
}

func BenchmarkDenyHotKey(b *testing.B) {
	const limit = 100
	fill := func(b *testing.B) *Table {
		tb := benchTable(b, false, limit)
		for tb.Allow("hot", 1).Status == verdict.Allowed {
		}
		return tb
	}
	b.Run("serial", func(b *testing.B) {
		tb := fill(b)
		b.ReportAllocs()
		for b.Loop() {
			tb.Allow("hot", 1)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		tb := fill(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tb.Allow("hot", 1)
			}
		})
	})
}

// benchKeyTables returns the KeyTables of the hot-key benchmarks, with a
// capacity no benchmark exhausts at a fixed time (the buckets), or a limit
// that a time advancing by one interval per check never reaches (the log).
// They bypass policy's bounds on purpose: the check's cost is the same.
func benchKeyTables(tb testing.TB) map[string]tableport.KeyTable {
	keys := NewKeys(1 << 20)
	g, err := NewGCRATable(window.NewGCRA(time.Hour, 1<<32-1, 1<<32-1), keys)
	require.NoError(tb, err)
	w, err := NewWarmTable(window.NewWarmUp(time.Second, 65*time.Millisecond, 1_000_000, 1_000_000_000), keys)
	require.NoError(tb, err)
	l, err := NewLogTable(time.Second, 1000, keys)
	require.NoError(tb, err)
	return map[string]tableport.KeyTable{"gcra": g, "warmup": w, "log": l}
}

// BenchmarkKeyTableHotKey measures the new algorithms' check on one hot key,
// admitted, next to the sliding window's (sliding: Table.Allow on the
// published time, the fast path; sliding-at: Table.AllowAt with the time
// passed in, as the KeyTables take it). Serially the time advances by one
// interval of the log per check (so the log admits every check); in
// parallel it is fixed (the log denies once full, the others admit).
func BenchmarkKeyTableHotKey(b *testing.B) {
	const step = int64(time.Millisecond)
	b.Run("sliding/serial", func(b *testing.B) {
		tb := benchTable(b, false, maxCount/4)
		b.ReportAllocs()
		for b.Loop() {
			tb.Allow("hot", 1)
		}
	})
	b.Run("sliding-at/serial", func(b *testing.B) {
		tb := benchTable(b, false, maxCount/4)
		now := base
		b.ReportAllocs()
		for b.Loop() {
			now += step
			tb.AllowAt("hot", now, 1)
		}
	})
	tables := benchKeyTables(b)
	for _, name := range []string{"gcra", "warmup", "log"} {
		b.Run(name+"/serial", func(b *testing.B) {
			tb := tables[name]
			now := base
			b.ReportAllocs()
			for b.Loop() {
				now += step
				tb.Allow("hot", now, 1)
			}
		})
	}
	b.Run("sliding/parallel", func(b *testing.B) {
		tb := benchTable(b, false, maxCount/4)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tb.Allow("hot", 1)
			}
		})
	})
	for _, name := range []string{"gcra", "warmup", "log"} {
		b.Run(name+"/parallel", func(b *testing.B) {
			tb := tables[name]
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tb.Allow("hot-parallel", base, 1)
				}
			})
		})
	}
}

// BenchmarkKeyTableDenyHotKey measures a denied check on a full hot key,
// next to the sliding window's cached denial (BenchmarkDenyHotKey's).
func BenchmarkKeyTableDenyHotKey(b *testing.B) {
	b.Run("sliding", func(b *testing.B) {
		tb := benchTable(b, false, 100)
		for tb.Allow("hot", 1).Status == verdict.Allowed {
		}
		b.ReportAllocs()
		for b.Loop() {
			tb.Allow("hot", 1)
		}
	})
	keys := NewKeys(1 << 10)
	g, err := NewGCRATable(window.NewGCRA(time.Minute, 100, 0), keys)
	require.NoError(b, err)
	w, err := NewWarmTable(window.NewWarmUp(time.Minute, time.Minute, 100, 0), keys)
	require.NoError(b, err)
	l, err := NewLogTable(time.Minute, 100, keys)
	require.NoError(b, err)
	for name, tb := range map[string]tableport.KeyTable{"gcra": g, "warmup": w, "log": l} {
		b.Run(name, func(b *testing.B) {
			for tb.Allow("hot", base, 1).Allowed {
			}
			b.ReportAllocs()
			for b.Loop() {
				tb.Allow("hot", base, 1)
			}
		})
	}
}

// BenchmarkWarmTablePaths measures a WarmTable check of one unit on each of
// its paths (see WarmTable), serially, over 1000 keys in turn, with the rule
// of benchKeyTables (T = 1µs, 65000 stored permits, a burst no loop
// exhausts):
//
//   - warm: no stored permits, in debt (a key used above its rate);
//   - denied: in debt beyond the burst;
//   - cold: every check after a long idle (a key used below its rate);
//   - ramp: stored permits being spent (a key warming up), Check's float
//     path.
func BenchmarkWarmTablePaths(b *testing.B) {
	w := window.NewWarmUp(time.Second, 65*time.Millisecond, 1_000_000, 1_000_000_000)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprint("key", i)
	}
	for _, bc := range []struct {
		name string
		fill int64 // the first check's cost, on every key
		step int64 // ns between checks
	}{
		{"warm", 100_000, 0},
		{"denied", 1_000_000_000, 0},
		{"cold", 1, int64(100 * time.Microsecond)}, // each key idles 100ms
		{"ramp", 1, 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tb, err := NewWarmTable(w, NewKeys(2000))
			require.NoError(b, err)
			now := base
			for _, k := range keys {
				require.True(b, tb.Allow(k, now, bc.fill).Allowed)
			}
			want := bc.name != "denied"
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				now += bc.step
				if tb.Allow(keys[i], now, 1).Allowed != want {
					b.Fatalf("%s: not %v", bc.name, want)
				}
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
	}
}
