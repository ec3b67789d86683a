package localcache

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// keyTables returns one table of each KeyTable kind for a rule of limit per
// window (burst for the buckets), each with its own key bound of max keys.
func keyTables(t testing.TB, win time.Duration, limit, burst int64, warmup time.Duration, max int64) map[string]tableport.KeyTable {
	t.Helper()
	g, err := NewGCRATable(window.NewGCRA(win, limit, burst), NewKeys(max))
	require.NoError(t, err)
	w, err := NewWarmTable(window.NewWarmUp(win, warmup, limit, burst), NewKeys(max))
	require.NoError(t, err)
	l, err := NewLogTable(win, min(limit, 1024), NewKeys(max))
	require.NoError(t, err)
	return map[string]tableport.KeyTable{"gcra": g, "warm": w, "log": l}
}

// gap is a random arrival gap around the interval iv.
func gap(r *rand.Rand, iv int64) int64 {
	switch r.IntN(20) {
	case 0:
		return r.Int64N(50 * iv)
	case 1, 2:
		return 0
	}
	return r.Int64N(iv)
}

// TestGCRATableMatchesMath: on random arrivals over a few keys, the table's
// every Outcome field is window.GCRA's on a plain per-key TAT.
func TestGCRATableMatchesMath(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		win          time.Duration
		limit, burst int64
	}{{time.Second, 10, 0}, {time.Second, 3, 5}, {time.Minute, 100, 1}} {
		t.Run(fmt.Sprintf("%v/%d/%d", tc.win, tc.limit, tc.burst), func(t *testing.T) {
			t.Parallel()
			g := window.NewGCRA(tc.win, tc.limit, tc.burst)
			tb, err := NewGCRATable(g, NewKeys(100))
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(31, uint64(i)))
			ref := map[string]int64{}
			now := base
			for step := 0; step < 5000; step++ {
				now += gap(rng, g.Interval())
				key := fmt.Sprint("k", rng.IntN(3))
				n := 1 + rng.Int64N(g.Burst())
				tat := ref[key]
				next, ok := g.Admit(tat, now, n)
				want := verdict.Outcome{Remaining: g.Remaining(tat, now), ResetAfter: g.ResetAfter(tat, now), RetryAfter: g.RetryAfter(tat, now, n)}
				if ok {
					ref[key] = next
					want = verdict.Outcome{Allowed: true, Remaining: g.Remaining(next, now), ResetAfter: g.ResetAfter(next, now)}
				}
				require.Equal(t, want, tb.Allow(key, now, n), "step %d", step)
				p := tb.Peek(key, now)
				require.Equal(t, g.Remaining(ref[key], now), p.Remaining)
				require.Equal(t, p.Remaining >= 1, p.Allowed)
			}
		})
	}
}

// TestWarmTableMatchesMath: the packed state decides exactly what
// window.WarmUp decides on a state rounded as the packing rounds it.
func TestWarmTableMatchesMath(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		win, warm    time.Duration
		limit, burst int64
	}{{time.Second, 5 * time.Second, 10, 0}, {time.Second, 10 * time.Second, 3, 4}, {time.Minute, time.Minute, 1000, 100}} {
		t.Run(fmt.Sprintf("%v/%d/%d/%v", tc.win, tc.limit, tc.burst, tc.warm), func(t *testing.T) {
			t.Parallel()
			w := window.NewWarmUp(tc.win, tc.warm, tc.limit, tc.burst)
			tb, err := NewWarmTable(w, NewKeys(100))
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(32, uint64(i)))
			ref := map[string]window.Warm{}
			now := base + 321
			iv := int64(w.Unit().Stable * 1000)
			var allowed, denied int
			for step := 0; step < 5000; step++ {
				now += gap(rng, iv)
				key := fmt.Sprint("k", rng.IntN(3))
				n := 1 + rng.Int64N(w.Unit().Burst)
				s, seen := ref[key]
				if !seen {
					s = w.Fresh(now)
				}
				next, ok, _, _, retry := w.Check(s, now, n)
				want := verdict.Outcome{Remaining: w.Remaining(s, now), ResetAfter: w.ResetAfter(s, now), RetryAfter: retry}
				if ok {
					allowed++
					next = reference.RoundWarm(w.Unit(), next)
					ref[key] = next
					want = verdict.Outcome{Allowed: true, Remaining: w.Remaining(next, now), ResetAfter: w.ResetAfter(next, now)}
				} else {
					denied++
				}
				require.Equal(t, want, tb.Allow(key, now, n), "step %d", step)
			}
			require.Positive(t, allowed)
			require.Positive(t, denied)
		})
	}
}

// TestWarmPacking: a packed state reads back exactly from any check time
// within its horizon ahead and 2^43 µs behind; a word further ahead is a
// wrapped past and reads as a fresh key; the sentinels read as fresh.
func TestWarmPacking(t *testing.T) {
	t.Parallel()
	w := window.NewWarmUp(time.Second, 10*time.Second, 10, 20)
	tb, err := NewWarmTable(w, NewKeys(1))
	require.NoError(t, err)
	now := base + 777
	us := now / 1000
	for _, tc := range []struct {
		name  string
		next  int64 // µs
		fresh bool
	}{
		{"now", us, false},
		{"ahead by the horizon", us + tb.horizon, false},
		// A state at its most debt (3·Burst·T), written by a check whose
		// clock read 1ms later than this one's.
		{"ahead by a cold burst, 1ms skewed", us + int64(math.Ceil(coldBurst(w.Unit()))) + 1000, false},
		{"behind by a minute", us - 60e6, false},
		{"behind by 100 days", us - 100*86400e6, false},
		{"ahead past the horizon", us + tb.horizon + 1, true},
		{"behind by the modulus less the horizon", us - 1<<44 + tb.horizon + 1, true},
		// The documented limit: a key idle for exactly the modulus (about
		// 203 days) without a sweep reads as if it were now.
		{"behind by the modulus", us - 1<<44, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := reference.RoundWarm(w.Unit(), window.Warm{Next: tc.next, Stored: 0.3 * w.Unit().MaxPermits})
			word, packed := tb.pack(s)
			require.Equal(t, s, packed)
			got := tb.unpack(word, now)
			switch {
			case tc.fresh:
				require.Equal(t, w.Fresh(now), got)
			case tc.next < us-1<<43:
				require.Equal(t, window.Warm{Next: tc.next + 1<<44, Stored: s.Stored}, got)
			default:
				require.Equal(t, s, got)
			}
		})
	}
	require.Equal(t, w.Fresh(now), tb.unpack(warmIdle, now))
	// The stored permits' step is about 1/16 of a permit at the bound.
	require.InDelta(t, 1.0/16, float64(maxWarmPermits)/warmSteps, 1e-5)
	require.EqualValues(t, warmSteps, reference.WarmSteps, "the reference rounds as the table packs")
}

// TestLogTableMatchesLog: the ring decides what reference.Log, the exact
// oracle, decides, with Remaining = Limit − InWindow; a denial's RetryAfter
// is exact on the oracle (denied 1ns before, admitted at it).
func TestLogTableMatchesLog(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		win   time.Duration
		limit int64
	}{{time.Second, 10}, {time.Second, 1}, {time.Minute, 100}, {time.Second, 1024}} {
		t.Run(fmt.Sprintf("%v/%d", tc.win, tc.limit), func(t *testing.T) {
			t.Parallel()
			tb, err := NewLogTable(tc.win, tc.limit, NewKeys(10))
			require.NoError(t, err)
			ref := reference.NewLog(tc.win, tc.limit)
			type ev struct{ t, n int64 }
			var events []ev
			replay := func() *reference.Log {
				l := reference.NewLog(tc.win, tc.limit)
				for _, e := range events {
					l.Add(e.t, e.n)
				}
				return l
			}
			rng := rand.New(rand.NewPCG(33, uint64(i)))
			iv := int64(tc.win) / tc.limit
			now := base
			var denied int
			for step := 0; step < 3000; step++ {
				now += gap(rng, iv)
				n := 1 + rng.Int64N(min(tc.limit, 5))
				at := fmt.Sprintf("step %d t=%d n=%d", step, now, n)
				o := tb.Allow("k", now, n)
				require.Equal(t, ref.Allow(now, n), o.Allowed, at)
				require.Equal(t, tc.limit-ref.InWindow(now), o.Remaining, at)
				if o.Allowed {
					events = append(events, ev{now, n})
					require.Equal(t, tc.win, o.ResetAfter, at)
					continue
				}
				denied++
				ra := int64(o.RetryAfter)
				require.Positive(t, ra, at)
				if denied%10 == 0 {
					l := replay()
					require.False(t, l.Allow(now+ra-1, n), at)
					require.True(t, l.Allow(now+ra, n), at)
				}
			}
			require.Positive(t, denied)
		})
	}
}

// TestKeyTablesBurstUnderContention: goroutines checking one key at one
// instant admit exactly the capacity between them, with sweeps racing
// (a sweep never evicts a key that is not full again, so it can never hand
// out a second bucket).
func TestKeyTablesBurstUnderContention(t *testing.T) {
	t.Parallel()
	for name, tb := range keyTables(t, time.Second, 100, 0, 10*time.Second, 10) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			now := base
			want := int64(100)
			if name == "warm" {
				// Cold: each unit of the burst costs up to 3T.
				want = countAdmitted(tb, "probe", now)
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 100; i++ {
						if tb.Allow("k", now, 1).Allowed {
							admitted.Add(1)
						}
						if i%10 == 0 {
							tb.Sweep(now)
						}
					}
				}()
			}
			wg.Wait()
			require.Equal(t, want, admitted.Load())
		})
	}
}

// countAdmitted checks unit costs of key at now until one is denied.
func countAdmitted(tb tableport.KeyTable, key string, now int64) int64 {
	var n int64
	for tb.Allow(key, now, 1).Allowed {
		n++
	}
	return n
}

// TestKeyTablesSweep: Sweep evicts exactly the keys whose state is a fresh
// key's, releases their place in the bound, and a key checked after its
// eviction starts over as a fresh key.
func TestKeyTablesSweep(t *testing.T) {
	t.Parallel()
	for name, tb := range keyTables(t, time.Second, 10, 0, time.Second, 10) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			now := base
			require.True(t, tb.Allow("busy", now, 10).Allowed || name == "warm")
			require.True(t, tb.Allow("idle", now, 1).Allowed)
			require.Equal(t, 2, sizeOf(tb))
			require.Zero(t, tb.Sweep(now), "nothing is idle yet")
			// 1.5s later "idle" is idle (its one unit is long gone; warm:
			// 1s warm-up, cold again); "busy" is checked again at 1.5s.
			later := now + int64(1500*time.Millisecond)
			require.True(t, tb.Allow("busy", later, 1).Allowed)
			require.Equal(t, 1, tb.Sweep(later))
			require.Equal(t, 1, sizeOf(tb))
			// Evicted: it starts over with its whole capacity.
			require.Equal(t, tb.Peek("fresh", later), tb.Peek("idle", later))
			require.True(t, tb.Allow("idle", later, 1).Allowed)
			require.Equal(t, 2, sizeOf(tb))
			// Much later, everything is idle.
			require.Equal(t, 2, tb.Sweep(later+int64(time.Hour)))
			require.Zero(t, sizeOf(tb))
		})
	}
}

// TestKeyTablesDoNotAllocate: a check on a tracked key (admitted or
// denied) allocates nothing; a sliding log allocates only when a key's
// count reaches a new high. Nor does a check of a key without an entry. Not parallel: AllocsPerRun counts every
// goroutine's allocations.
func TestKeyTablesDoNotAllocate(t *testing.T) {
	for name, tb := range keyTables(t, time.Second, 1000, 0, 10*time.Second, 10) {
		t.Run(name, func(t *testing.T) {
			now := base
			for i := 0; i < 1000; i++ { // fill the log's ring to its limit
				tb.Allow("hot", now, 1)
			}
			require.Zero(t, testing.AllocsPerRun(1000, func() { tb.Allow("hot", now, 1) }), "denied")
			require.Zero(t, testing.AllocsPerRun(1000, func() {
				now += int64(time.Millisecond) // one unit's interval: mostly admitted
				tb.Allow("hot", now, 1)
			}), "admitted")
			require.Zero(t, testing.AllocsPerRun(1000, func() { tb.Peek("hot", now) }), "peek")
			// Keys without an entry: decided on the sketch (allocated at
			// the first such decision).
			keys, _ := keysOf(tb, "")
			keys.n.Add(1 << 20) // the bound is full
			defer keys.n.Add(-1 << 20)
			tb.Allow("stranger", now, 1)
			i := 0
			require.Zero(t, testing.AllocsPerRun(1000, func() {
				now += int64(time.Millisecond)
				tb.Allow(strangers[i%len(strangers)], now, 1)
				i++
			}), "untracked")
			require.Zero(t, testing.AllocsPerRun(1000, func() { tb.Peek("stranger", now) }), "untracked peek")
		})
	}
}

// strangers are keys that TestKeyTablesDoNotAllocate checks untracked.
var strangers = func() []string {
	s := make([]string, 64)
	for i := range s {
		s[i] = fmt.Sprint("stranger-", i)
	}
	return s
}()
