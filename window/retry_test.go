package window_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/window"
)

// retryState is a Counter after a replayed history, and a time at or after
// its last event.
type retryState struct {
	c *reference.Counter
	t int64
}

// randomRetryState replays a random history into a Counter: mostly Allow,
// sometimes Add (over-filling buckets past the limit, as a store merge can).
func randomRetryState(r *rand.Rand, geo window.Sliding, limit int64) retryState {
	c := reference.NewCounter(geo, limit)
	W := int64(geo.Window())
	start := r.Int64N(1<<42) - 1<<41
	span := W * (1 + r.Int64N(3))
	g := generators[r.IntN(len(generators))]
	count := int(limit) * (1 + r.IntN(4))
	reqs := requestStream(r, geo, g, start, span, count, max(1, min(limit, 1+r.Int64N(4))))
	last := start
	for _, q := range reqs {
		if r.IntN(20) == 0 {
			c.Add(q.t, q.n)
		} else {
			c.Allow(q.t, q.n)
		}
		last = q.t
	}
	t := last
	switch r.IntN(4) {
	case 0: // right after the last request
	case 1:
		t += r.Int64N(geo.Sub())
	case 2: // on a bucket boundary
		t = (geo.Index(t) + 1 + r.Int64N(int64(geo.Buckets()))) * geo.Sub()
	default:
		t += r.Int64N(W)
	}
	return retryState{c: c, t: t}
}

// TestRetryAfterRandom checks Counter.RetryAfter against Counter.Allow on
// copies of random states: 0 when n is admitted now; -1 when n > limit;
// otherwise a copy admits n at t+RetryAfter, and denies it a little earlier
// (max(w/1000, 1µs) before, when RetryAfter is longer than that). For a fixed
// window a denial retries exactly at the window's end.
func TestRetryAfterRandom(t *testing.T) {
	t.Parallel()
	geos := []window.Sliding{
		window.NewWeighted(time.Second, 1), window.NewWeighted(time.Second, 2), window.NewWeighted(time.Second, 5),
		window.NewWeighted(time.Second, 10), window.NewWeighted(time.Minute, 60), window.NewWeighted(3*time.Millisecond, 60),
		window.NewWeighted(7*time.Hour, 7), window.NewWeighted(30, 3), window.NewFixed(time.Second), window.NewFixed(3 * time.Millisecond),
		window.NewSliding(time.Second, 1), window.NewSliding(time.Second, 10), window.NewSliding(time.Minute, 60), window.NewSliding(30, 3),
	}
	for gi, geo := range geos {
		for _, limit := range []int64{1, 5, 10, 100, 1000} {
			t.Run(fmt.Sprintf("%s/L=%d", geoName(geo), limit), func(t *testing.T) {
				t.Parallel()
				r := rand.New(rand.NewPCG(uint64(gi), uint64(limit)))
				delta := max(geo.Sub()/1000, usec)
				denied := 0
				states := 400
				if limit >= 1000 {
					states = 100 // each replays thousands of requests
				}
				for range states {
					st := randomRetryState(r, geo, limit)
					n := 1 + r.Int64N(limit)
					if r.IntN(10) == 0 {
						n = limit + 1 + r.Int64N(3)
					}
					before := st.c.Clone()
					ra := st.c.RetryAfter(st.t, n)
					require.Equal(t, before, st.c, "RetryAfter changed the counter")

					allowed := st.c.Clone().Allow(st.t, n)
					if n > limit {
						require.Equal(t, int64(-1), ra, "n=%d > limit=%d", n, limit)
						require.False(t, allowed)
						continue
					}
					if allowed {
						require.Zero(t, ra, "t=%d n=%d allowed now (E=%v), RetryAfter must be 0", st.t, n, st.c.Estimate(st.t))
						continue
					}
					denied++
					require.Positive(t, ra, "t=%d n=%d denied (E=%v)", st.t, n, st.c.Estimate(st.t))
					if geo.Fixed() {
						k := geo.Index(st.t)
						require.Equal(t, (k+1)*geo.Sub()-st.t, ra, "fixed window retries at its end")
					}
					require.LessOrEqual(t, ra, int64(geo.ResetAfter(st.t)), "retry no later than the counter empties")
					if !st.c.Clone().Allow(st.t+ra, n) {
						require.Failf(t, "not admitted at t+RetryAfter", "geo %+v L=%d t=%d n=%d ra=%d: E(t+ra)=%v",
							geo, limit, st.t, n, ra, st.c.Estimate(st.t+ra))
					}
					if ra > delta && st.c.Clone().Allow(st.t+ra-delta, n) {
						require.Failf(t, "admitted before t+RetryAfter", "geo %+v L=%d t=%d n=%d ra=%d: E(t+ra−%d)=%v",
							geo, limit, st.t, n, ra, delta, st.c.Estimate(st.t+ra-delta))
					}
					// RetryAfter is the earliest nanosecond, not just close.
					if ra > 1 && st.c.Clone().Allow(st.t+ra-1, n) {
						require.Failf(t, "admitted 1ns before t+RetryAfter", "geo %+v L=%d t=%d n=%d ra=%d: E(t+ra−1)=%v",
							geo, limit, st.t, n, ra, st.c.Estimate(st.t+ra-1))
					}
				}
				assert.Greater(t, denied, 20, "too few denied states to test")
			})
		}
	}
}

// TestRetryAfterCases checks hand-computed RetryAfter values, including the
// rounding cases that failed before the fix in window.go:
//   - "empty at 61ns": an empty counter answered 1ns instead of 0, as
//     ⌈(61/1e9)·1e9⌉ = 62;
//   - "over-filled": c[k−B] = 30 > L (counted with Add, as merged counts can
//     be): ψ = 0.7 gave 700ms, but at t+700ms E = 9.000000000000002 and the
//     counter still denied; it admits from 700000001ns.
func TestRetryAfterCases(t *testing.T) {
	t.Parallel()
	type add struct{ t, n int64 }
	tests := []struct {
		name  string
		geo   window.Sliding
		limit int64
		adds  []add
		t, n  int64
		want  int64
	}{
		{"empty at 61ns", window.NewWeighted(time.Second, 1), 10, nil, 61, 1, 0},
		{"empty at 7ns B=10", window.NewWeighted(time.Second, 10), 10, nil, 7, 10, 0},
		{"empty n > limit", window.NewWeighted(time.Second, 10), 10, nil, 0, 11, -1},
		{"full n > limit", window.NewWeighted(time.Second, 10), 10, []add{{0, 10}}, 1, 11, -1},
		{"n = limit empty", window.NewWeighted(time.Second, 10), 10, nil, 5, 10, 0},
		{"n = 0 at the limit", window.NewWeighted(time.Second, 1), 10, []add{{0, 10}}, sec / 2, 0, 0},
		// B=1, W=1s: 10 in bucket 0. At 1s E = 10; room 9 when ψ = 0.1.
		{"B=1 start of next window", window.NewWeighted(time.Second, 1), 10, []add{{0, 10}}, sec, 1, 100 * msec},
		// At 1.5s E = 5: n=5 fits now, n=6 (room 4) at ψ = 0.6.
		{"B=1 mid window fits", window.NewWeighted(time.Second, 1), 10, []add{{0, 10}}, 3 * sec / 2, 5, 0},
		{"B=1 mid window", window.NewWeighted(time.Second, 1), 10, []add{{0, 10}}, 3 * sec / 2, 6, 100 * msec},
		// Still in bucket 0: full = 10 > room, wait for bucket 1, then ψ = 0.1.
		{"B=1 same bucket", window.NewWeighted(time.Second, 1), 10, []add{{0, 10}}, sec / 4, 1, 850 * msec},
		// At ψ = 0.7 exactly E = 0.3·30 = 9: the float product is 9 plus an
		// ulp, which the admit test's tolerance absorbs.
		{"over-filled", window.NewWeighted(time.Second, 1), 10, []add{{0, 30}}, sec, 1, 700 * msec},
		// B=2, w=1s: 6 in bucket 0, 4 in bucket 1; t=1.5s, E = 10.
		// n=1: full(2) = 4, ψ = 1 − 5/6 → ⌈1e9/6⌉ = 166666667 into bucket 2.
		{"B=2 room 9", window.NewWeighted(2*time.Second, 2), 10, []add{{0, 6}, {3 * sec / 2, 4}}, 3 * sec / 2, 1, 2*sec + 166666667 - 3*sec/2},
		// n=5: ψ = 1 − 1/6 → ⌈5e9/6⌉ = 833333334.
		{"B=2 room 5", window.NewWeighted(2*time.Second, 2), 10, []add{{0, 6}, {3 * sec / 2, 4}}, 3 * sec / 2, 5, 2*sec + 833333334 - 3*sec/2},
		// n=10: room 0, only when both buckets have left: the ResetAfter of bucket 1.
		{"B=2 room 0", window.NewWeighted(2*time.Second, 2), 10, []add{{0, 6}, {3 * sec / 2, 4}}, 3 * sec / 2, 10, 4*sec - 3*sec/2},
		{"negative times", window.NewWeighted(time.Second, 1), 10, []add{{-sec, 10}}, 0, 1, 100 * msec},
		{"fixed fits", window.NewFixed(time.Second), 10, []add{{sec / 5, 9}}, sec / 2, 1, 0},
		{"fixed denied", window.NewFixed(time.Second), 10, []add{{sec / 5, 10}}, sec / 2, 1, sec / 2},
		{"fixed denied negative", window.NewFixed(time.Second), 10, []add{{-sec + 1, 10}}, -sec / 4, 1, sec / 4},
		{"fixed over-filled", window.NewFixed(time.Second), 10, []add{{0, 25}}, sec - 1, 10, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := reference.NewCounter(tt.geo, tt.limit)
			for _, a := range tt.adds {
				c.Add(a.t, a.n)
			}
			got := c.RetryAfter(tt.t, tt.n)
			assert.Equal(t, tt.want, got)
			if got > 0 {
				assert.False(t, c.Clone().Allow(tt.t+got-1, tt.n), "admitted 1ns early")
				assert.True(t, c.Clone().Allow(tt.t+got, tt.n), "not admitted at t+RetryAfter")
			}
		})
	}
}

// TestRetryAfterAsksOnlyWindowBuckets checks that Sliding.RetryAfter asks
// count only about the buckets Estimate would (Oldest(k)..k), as its doc
// promises callers whose count func knows only those, and each only once.
func TestRetryAfterAsksOnlyWindowBuckets(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	for _, geo := range []window.Sliding{window.NewWeighted(time.Second, 1), window.NewWeighted(time.Second, 10), window.NewWeighted(time.Minute, 60), window.NewFixed(time.Second)} {
		for range 2000 {
			tm := r.Int64N(1<<40) - 1<<39
			k := geo.Index(tm)
			counts := map[int64]int64{}
			for j := geo.Oldest(k); j <= k; j++ {
				counts[j] = r.Int64N(30)
			}
			limit := 1 + r.Int64N(40)
			n := r.Int64N(limit + 2)
			calls := map[int64]int{}
			geo.RetryAfter(tm, limit, n, func(j int64) int64 {
				c, ok := counts[j]
				require.True(t, ok, "count(%d) asked, outside %d..%d", j, geo.Oldest(k), k)
				calls[j]++
				return c
			})
			// One snapshot: each bucket read once (n ≤ limit), so
			// concurrently changing counts cannot make it inconsistent.
			if n <= limit {
				for j := geo.Oldest(k); j <= k; j++ {
					require.Equal(t, 1, calls[j], "count(%d) calls", j)
				}
			}
		}
	}
}

// TestRetryAfterInconsistentCounts checks that RetryAfter returns promptly,
// within ResetAfter, even when count answers differently on every call (as
// counts updated concurrently by other goroutines or nodes can).
func TestRetryAfterInconsistentCounts(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(12, 13))
	for _, geo := range []window.Sliding{window.NewWeighted(time.Hour, 1), window.NewWeighted(time.Hour, 10), window.NewWeighted(time.Minute, 60)} {
		for range 2000 {
			tm := r.Int64N(1<<40) - 1<<39
			calls := int64(0)
			growing := func(j int64) int64 { calls++; return r.Int64N(10) + calls }
			ra := geo.RetryAfter(tm, 20, 1+r.Int64N(20), growing)
			require.GreaterOrEqual(t, ra, time.Duration(0))
			require.LessOrEqual(t, ra, geo.ResetAfter(tm))
			require.LessOrEqual(t, calls, int64(geo.Span()), "count called more than once per bucket")
		}
	}
}
