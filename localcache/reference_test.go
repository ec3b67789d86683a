package localcache

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// referenceGeometries are the geometries the reference tests run on.
var referenceGeometries = []struct {
	name string
	geo  window.Sliding
}{
	{"B=1", window.NewSliding(time.Minute, 1)},
	{"B=5", window.NewSliding(time.Minute, 5)},
	{"B=10", window.NewSliding(time.Minute, 10)},
	{"B=60", window.NewSliding(time.Minute, 60)},
	{"weighted B=1", window.NewWeighted(time.Minute, 1)},
	{"weighted B=10", window.NewWeighted(time.Minute, 10)},
	{"fixed", window.NewFixed(time.Minute)},
}

// TestLocalMatchesCounter drives a Local table and reference.Counter (one per
// key) with the same random single-goroutine streams of AllowAt calls at
// monotone times and checks every verdict against the reference.
func TestLocalMatchesCounter(t *testing.T) {
	t.Parallel()
	for _, g := range referenceGeometries {
		grids := []struct {
			name string
			step int64
		}{
			{"ns", 1},
			{"ms", int64(time.Millisecond)},
			{"tenth-bucket", g.geo.Sub() / 10},
		}
		for _, grid := range grids {
			t.Run(g.name+"/"+grid.name, func(t *testing.T) {
				t.Parallel()
				for seed := uint64(1); seed <= 5; seed++ {
					checkStream(t, g.geo, seed, grid.step, 1500)
				}
			})
		}
	}
}

// checkStream runs one random stream over three keys.
func checkStream(t *testing.T, geo window.Sliding, seed uint64, grid int64, steps int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, uint64(geo.Sub())^uint64(grid)))
	limit := []int64{1, 2, 7, 10, 100, 1000}[rng.IntN(6)]
	tb := mkTable(t, geo, limit, false)
	keys := []string{"alpha", "beta", "gamma"}
	ref := map[string]*reference.Counter{}
	for _, k := range keys {
		ref[k] = reference.NewCounter(geo, limit)
	}
	now := base + rng.Int64N(geo.Sub())
	var admitted, denied int
	for i := 0; i < steps; i++ {
		switch r := rng.IntN(20); {
		case r < 3: // same time
		case r < 11:
			now += rng.Int64N(geo.Sub()/5 + 1)
		case r < 19:
			now += rng.Int64N(geo.Sub())
		default: // a jump of up to two windows: everything may expire
			now += rng.Int64N(2 * int64(geo.Window()))
		}
		now = now / grid * grid
		n := 1 + rng.Int64N(max(limit/3, 1))
		switch rng.IntN(25) {
		case 0:
			n = limit
		case 1:
			n = limit + 1 // can never pass
		}
		key := keys[rng.IntN(len(keys))]
		c := ref[key]
		at := fmt.Sprintf("seed %d step %d key %s t=%d n=%d L=%d", seed, i, key, now-base, n, limit)

		before := c.Estimate(now)
		oldCount := c.Count(oldest(geo, geo.Index(now)))
		v := tb.AllowAt(key, now, n)
		ok := c.Allow(now, n)
		require.Equal(t, ok, v.Status == verdict.Allowed, "%s: local %v, reference E=%.17g", at, v.Status, before)
		require.True(t, tracked(tb, key), at)
		after := c.Estimate(now)
		want := wantRemaining(limit, after)
		if ok {
			admitted++
			require.Zero(t, v.RetryAfter, at)
			if geo.Span() == 1 {
				require.Equal(t, want, v.Remaining, at)
			} else {
				// The fast path reports the room computed when the bucket's
				// budget was, at an earlier phase: never more than the truth,
				// and short of it by at most what the oldest bucket lost
				// since (see Verdict.Remaining).
				require.LessOrEqual(t, v.Remaining, want, at)
				require.GreaterOrEqual(t, v.Remaining, want-oldCount, at)
			}
		} else {
			denied++
			require.Equal(t, verdict.OverLimit, v.Status, at)
			require.Equal(t, want, v.Remaining, at)
			require.Equal(t, c.RetryAfter(now, n), int64(v.RetryAfter), at)
		}

		est, own, found := tb.estimate(key, now)
		require.True(t, found, at)
		require.InDelta(t, after, est, 1e-9*float64(limit), at)
		var inWindow int64
		for j := oldest(geo, geo.Index(now)); j <= geo.Index(now); j++ {
			inWindow += c.Count(j)
		}
		require.Equal(t, inWindow, own, at)
	}
	// The streams must exercise both outcomes.
	require.Positive(t, admitted)
	require.Positive(t, denied)
}

// TestFloatBoundary: at the float boundary E+n = L the table decides
// exactly as reference.Counter. Both run the one admit test
// (window.Estimate.Room) on the estimate split into its whole and weighted
// parts, so a cached budget (room of the window without the current bucket's
// pend) admits exactly what the test on the whole estimate admits. Before
// that, the table's floor(L − E + 1e-9) admitted where the reference's
// E + n ≤ L denied, by less than 1e-9 (for example at the last nanosecond of
// a 1-minute bucket, where the oldest bucket's weight is 1/6e10).
func TestFloatBoundary(t *testing.T) {
	t.Parallel()
	t.Run("last nanosecond of a bucket", func(t *testing.T) {
		t.Parallel()
		geo := window.NewWeighted(time.Minute, 1)
		t0 := bucketStart(geo, 0)
		tb := mkTable(t, geo, 10, false)
		c := reference.NewCounter(geo, 10)
		for _, s := range []struct{ at, n int64 }{{t0, 1}, {t0 + geo.Sub(), 9}} {
			require.True(t, c.Allow(s.at, s.n))
			require.Equal(t, verdict.Allowed, tb.AllowAt("k", s.at, s.n).Status)
		}
		// E = 9 + 1/6e10: within the tolerance of 9, so both admit.
		last := t0 + 2*geo.Sub() - 1
		require.True(t, 1 <= geo.Parts(last, c.Count).Room(10), "reference: E=%.17g", c.Estimate(last))
		assert.Equal(t, verdict.Allowed, tb.AllowAt("k", last, 1).Status)
		assert.Equal(t, verdict.OverLimit, tb.AllowAt("k", last, 1).Status, "and nothing more")
	})
	for _, w := range []time.Duration{time.Second, time.Minute, time.Hour} {
		for _, b := range []int{1, 2, 5} {
			geo := window.NewWeighted(w, b)
			t.Run(fmt.Sprintf("%v/B=%d", w, b), func(t *testing.T) {
				t.Parallel()
				d := boundarySweep(t, geo, 3000, func(c boundaryCase) {
					t.Errorf("the table and reference.Counter disagree: %+v", c)
				})
				assert.Zero(t, d)
			})
		}
	}
}

// boundaryCase is one check at the float boundary.
type boundaryCase struct {
	Counts     []int64
	Offset, N  int64
	local, ref bool
	excess     float64 // E+n−L by the reference's arithmetic
}

// boundarySweep builds random bucket counts in a fresh table and a Counter,
// asks for the n that just fits or just does not at times where the oldest
// bucket's weight makes E nearly an integer, and calls f for each
// disagreement; it returns how many there were.
func boundarySweep(t *testing.T, geo window.Sliding, iters int, f func(boundaryCase)) int {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(geo.Sub()), uint64(geo.Buckets())))
	sub := geo.Sub()
	span := geo.Span()
	disagree := 0
	for it := 0; it < iters; it++ {
		limit := 1 + rng.Int64N(2000)
		counts := make([]int64, span)
		rest := limit
		for i := range counts {
			counts[i] = rng.Int64N(rest + 1)
			rest -= counts[i]
		}
		var off int64
		switch rng.IntN(3) {
		case 0:
			off = sub - 1 - rng.Int64N(1000)
		case 1:
			q := 1 + rng.Int64N(50)
			off = sub * rng.Int64N(q) / q
		default:
			off = rng.Int64N(sub)
		}
		first := bucketStart(geo, 0)
		tb := mkTable(t, geo, limit, false)
		c := reference.NewCounter(geo, limit)
		for i, cnt := range counts {
			if cnt > 0 {
				at := first + int64(i)*sub
				require.True(t, c.Allow(at, cnt))
				require.Equal(t, verdict.Allowed, tb.AllowAt("k", at, cnt).Status)
			}
		}
		now := first + int64(span-1)*sub + off
		e := c.Estimate(now)
		n := max(limit-int64(math.Floor(e))-rng.Int64N(2), 1)
		ref := c.Allow(now, n)
		local := tb.AllowAt("k", now, n).Status == verdict.Allowed
		if local != ref {
			disagree++
			f(boundaryCase{Counts: counts, Offset: off, N: n, local: local, ref: ref, excess: e + float64(n) - float64(limit)})
		}
	}
	return disagree
}

// TestNewEveryPrecision checks that New accepts every B from 1 to 64 and the
// fixed window, and that each table's ring covers the window: estimates follow
// reference.Counter through two windows of per-bucket traffic.
func TestNewEveryPrecision(t *testing.T) {
	t.Parallel()
	type tc struct {
		name string
		geo  window.Sliding
	}
	var cases []tc
	for b := 1; b <= 64; b++ {
		cases = append(cases, tc{fmt.Sprintf("B=%d", b), window.NewSliding(time.Duration(b)*time.Second, b)})
	}
	cases = append(cases, tc{"fixed", window.NewFixed(time.Second)})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const limit = 1000
			tb, err := New(Config{Geometry: c.geo, Limit: limit, Keys: NewKeys(10)})
			require.NoError(t, err)
			ref := reference.NewCounter(c.geo, limit)
			sub := c.geo.Sub()
			t0 := bucketStart(c.geo, 0)
			for i := int64(0); i < int64(2*c.geo.Span()+2); i++ {
				for _, at := range []int64{t0 + i*sub, t0 + i*sub + sub/3, t0 + i*sub + sub - 1} {
					n := 1 + i%3
					require.Equal(t, ref.Allow(at, n), tb.AllowAt("k", at, n).Status == verdict.Allowed)
					est, _, ok := tb.estimate("k", at)
					require.True(t, ok)
					require.InDelta(t, ref.Estimate(at), est, 1e-9, "bucket %d", i)
				}
			}
			// And the limit binds.
			at := t0 + int64(2*c.geo.Span()+2)*sub
			for ref.Allow(at, 1) {
				require.Equal(t, verdict.Allowed, tb.AllowAt("k", at, 1).Status)
			}
			require.Equal(t, verdict.OverLimit, tb.AllowAt("k", at, 1).Status)
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 6)
	cases := []struct {
		name string
		cfg  Config
	}{
		{"nil keys", Config{Geometry: geo, Limit: 10}},
		{"zero limit", Config{Geometry: geo, Limit: 0, Keys: NewKeys(1)}},
		{"negative limit", Config{Geometry: geo, Limit: -1, Keys: NewKeys(1)}},
		{"limit too large", Config{Geometry: geo, Limit: maxCount/4 + 1, Keys: NewKeys(1)}},
		{"zero geometry", Config{Limit: 10, Keys: NewKeys(1)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tb, err := New(c.cfg)
			require.ErrorIs(t, err, errConfig)
			require.Nil(t, tb)
		})
	}
	tb, err := New(Config{Geometry: geo, Limit: maxCount / 4, Keys: NewKeys(1)})
	require.NoError(t, err, "the largest limit is accepted")
	require.Equal(t, verdict.Allowed, tb.AllowAt("k", base, maxCount/4).Status)
	_, err = newTable(Config{Geometry: geo, Limit: 1, Keys: NewKeys(1)}, 66)
	require.ErrorIs(t, err, errConfig, "no ring holds 66 slots")
}
