package window_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/window"
)

// boundEps is the float slack allowed in the two-sided bound: the estimate
// is a sum of integers and one product, so only rounding can break it.
func boundEps(e float64) float64 { return 1e-9 * max(1, math.Abs(e)) }

// checkEstimates feeds ev into a Counter in time order and, at every query
// time (interleaved, so the counter only ever holds events at or before the
// query), compares Counter.Estimate with a brute-force count:
//
//   - E equals the documented formula over brute-force bucket counts;
//   - sliding: E − ω·c[k−B] ≤ exact ≤ E + (1−ω)·c[k−B], exact over (t−W, t],
//     with ω the oldest bucket's weight: 1−φ weighted, 1 otherwise (so the
//     sliding window's E is never below exact);
//   - fixed: E is exactly the count of [k·W, t], and c[k] ≤ exact ≤ c[k]+c[k−1].
//
// It returns the number of queries checked.
func checkEstimates(t testing.TB, geo window.Sliding, ev []event, queries []int64) int {
	t.Helper()
	set := newEventSet(ev)
	c := reference.NewCounter(geo, math.MaxInt64)
	w, W, B := geo.Sub(), int64(geo.Window()), int64(geo.Buckets())
	next := 0
	for _, q := range queries {
		for next < len(set.ev) && set.ev[next].t <= q {
			c.Add(set.ev[next].t, set.ev[next].n)
			next++
		}
		e := c.Estimate(q)
		k := floorDiv(q, w)
		phase := float64(q-k*w) / float64(w)
		// Counts of bucket j as held at time q: only events up to q.
		bucket := func(j int64) int64 { return set.span(j*w, min((j+1)*w, q+1)) }
		exact := set.window(q, W)
		if geo.Fixed() {
			cur := bucket(k)
			if float64(cur) != e {
				require.Failf(t, "fixed estimate not exact", "geo %+v t=%d: E=%v, events in [kW, t] = %d", geo, q, e, cur)
			}
			if exact < cur || exact > cur+bucket(k-1) {
				require.Failf(t, "fixed window straddle", "geo %+v t=%d: exact=%d c[k]=%d c[k-1]=%d", geo, q, exact, cur, bucket(k-1))
			}
			continue
		}
		old := bucket(k - B)
		weight := 1.0
		if geo.Weighted() {
			weight = 1 - phase
		}
		formula := weight * float64(old)
		for j := k - B + 1; j <= k; j++ {
			formula += float64(bucket(j))
		}
		if math.Abs(formula-e) > boundEps(e) {
			require.Failf(t, "estimate differs from formula", "geo %+v t=%d: E=%v, formula over brute-force buckets=%v", geo, q, e, formula)
		}
		lo := e - weight*float64(old)
		hi := e + (1-weight)*float64(old)
		if float64(exact) < lo-boundEps(e) || float64(exact) > hi+boundEps(e) {
			require.Failf(t, "bound violated", "geo %+v t=%d (k=%d φ=%v): exact=%d not in [%v, %v], E=%v c[k−B]=%d",
				geo, q, k, phase, exact, lo, hi, e, old)
		}
	}
	return len(queries)
}

// TestEventSet checks the brute-force helper against a linear scan.
func TestEventSet(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	ev := make([]event, 300)
	for i := range ev {
		ev[i] = event{r.Int64N(1000) - 500, 1 + r.Int64N(3)}
	}
	ev = append(ev, event{0, 7}, event{0, 1}, event{100, 2})
	set := newEventSet(ev)
	for q := int64(-700); q <= 700; q++ {
		for _, w := range []int64{1, 10, 100, 333} {
			require.Equal(t, bruteWindow(ev, q, w), set.window(q, w), "t=%d w=%d", q, w)
		}
	}
}

var estimateGeometries = func() []window.Sliding {
	var geos []window.Sliding
	for _, b := range []int{1, 2, 5, 10, 60} {
		for _, w := range []time.Duration{3 * time.Millisecond, 6 * time.Second, time.Hour} {
			geos = append(geos, window.NewWeighted(w, b), window.NewSliding(w, b))
		}
	}
	for _, w := range []time.Duration{3 * time.Millisecond, 6 * time.Second, time.Hour} {
		geos = append(geos, window.NewFixed(w))
	}
	return geos
}()

func geoName(geo window.Sliding) string {
	switch {
	case geo.Fixed():
		return fmt.Sprintf("fixed/W=%v", geo.Window())
	case geo.Weighted():
		return fmt.Sprintf("weighted/B=%d/W=%v", geo.Buckets(), geo.Window())
	}
	return fmt.Sprintf("B=%d/W=%v", geo.Buckets(), geo.Window())
}

// TestEstimateBound checks the documented bound of the sliding-window
// estimate, and exactness of the fixed window, against brute force for
// B ∈ {1,2,5,10,60} and several traffic shapes, including negative times.
func TestEstimateBound(t *testing.T) {
	t.Parallel()
	for gi, geo := range estimateGeometries {
		for gj, g := range generators {
			t.Run(geoName(geo)+"/"+g.name, func(t *testing.T) {
				t.Parallel()
				for seed := range uint64(5) {
					r := rand.New(rand.NewPCG(seed, uint64(gi*100+gj)))
					W := int64(geo.Window())
					span := W * (1 + r.Int64N(4))
					start := -span / 2 // straddle zero: negative times too
					switch seed {
					case 2: // far from zero, bucket aligned
						start = r.Int64N(1<<40) * geo.Sub()
					case 3: // far below zero, unaligned
						start = -r.Int64N(1 << 50)
					}
					count := 200 + r.IntN(1500)
					maxCost := int64(1)
					if seed%2 == 1 {
						maxCost = 5
					}
					ev := g.gen(r, geo, start, span, count, maxCost)
					checkEstimates(t, geo, ev, queryTimes(r, geo, ev, start, span, 1500))
				}
			})
		}
	}
}

// TestEstimateBoundTight shows that the bound is attained at both ends, so it
// cannot be tightened: events all at the last ns of bucket k−B make the exact
// count the upper end, events all at its first ns the lower end.
func TestEstimateBoundTight(t *testing.T) {
	t.Parallel()
	for _, b := range []int{1, 2, 5, 10, 60} {
		t.Run(fmt.Sprint("B=", b), func(t *testing.T) {
			t.Parallel()
			geo := window.NewWeighted(time.Duration(b)*time.Second, b) // w = 1s
			const n = 100
			q := int64(b)*sec + sec/4 // k = B, φ = 1/4: bucket 0 is the oldest
			late := reference.NewCounter(geo, math.MaxInt64)
			late.Add(sec-1, n) // last ns of bucket 0: still inside (q−W, q]
			e := late.Estimate(q)
			require.InDelta(t, 0.75*n, e, 1e-9)
			require.InDelta(t, e+0.25*n, float64(n), 1e-9, "upper end attained: exact = E + φ·c")

			early := reference.NewCounter(geo, math.MaxInt64)
			early.Add(0, n) // first ns of bucket 0: already out of (q−W, q]
			e = early.Estimate(q)
			require.InDelta(t, 0.75*n, e, 1e-9)
			require.InDelta(t, e-0.75*n, 0, 1e-9, "lower end attained: exact = E − (1−φ)·c")
		})
	}
}

// FuzzEstimateBound checks the two-sided bound (sliding) or exactness (fixed)
// for fuzzed geometry and traffic. b = 0 selects a fixed window; otherwise
// B = b mod 64 + 1 buckets, weighted when b ≥ 128.
func FuzzEstimateBound(f *testing.F) {
	f.Add(uint64(1), uint8(10), uint16(1000), uint16(500))
	f.Add(uint64(2), uint8(1), uint16(1), uint16(100))
	f.Add(uint64(3), uint8(0), uint16(60000), uint16(1000))
	f.Add(uint64(4), uint8(59), uint16(7), uint16(2000))
	f.Add(uint64(5), uint8(4), uint16(65535), uint16(0))
	f.Add(uint64(6), uint8(137), uint16(1000), uint16(700))
	f.Fuzz(func(t *testing.T, seed uint64, b uint8, windowMs uint16, n uint16) {
		W := time.Duration(max(1, int(windowMs))) * time.Millisecond
		var geo window.Sliding
		if b == 0 {
			geo = window.NewFixed(W)
		} else {
			B := int(b)%64 + 1
			geo = window.NewSliding(W-W%time.Duration(B), B)
			if b >= 128 {
				geo = window.NewWeighted(W-W%time.Duration(B), B)
			}
		}
		r := rand.New(rand.NewPCG(seed, seed>>32|1))
		count := int(n) % 3000
		span := int64(geo.Window()) * (1 + r.Int64N(5))
		start := r.Int64N(1<<44) - 1<<43
		var ev []event
		for range 1 + r.IntN(3) { // mix shapes
			g := generators[r.IntN(len(generators))]
			ev = append(ev, g.gen(r, geo, start, span, count/2+1, 1+r.Int64N(4))...)
		}
		checkEstimates(t, geo, ev, queryTimes(r, geo, ev, start, span, 500))
	})
}
