package window_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/window"
)

// TestCounterTimeGoesBack checks the Counter's promise that times may go
// backwards by up to a window: with Add and Estimate at times anywhere in
// [newest − W, newest], every estimate still equals the formula over all the
// counts so far (bucket counts can hold events later than a backdated query:
// the counter cannot tell, and neither does the formula).
//
// With the original ring of Span()+1 buckets (before the fix in counter.go)
// this failed as soon as a query went back two sub-windows: B=10, one event
// per bucket 0..20, newest at bucket 20, Estimate 2 sub-windows back gave 10
// instead of 10.5, and half a window back 7 (buckets k−B..k−B+3 had been
// overwritten by newer ones), so Allow there over-admitted.
func TestCounterTimeGoesBack(t *testing.T) {
	t.Parallel()
	geos := []window.Sliding{
		window.NewWeighted(time.Second, 1), window.NewWeighted(time.Second, 2), window.NewWeighted(time.Second, 10),
		window.NewWeighted(time.Minute, 60), window.NewFixed(time.Second),
	}
	for gi, geo := range geos {
		t.Run(geoName(geo), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(14, uint64(gi)))
			W, w, B := int64(geo.Window()), geo.Sub(), int64(geo.Buckets())
			c := reference.NewCounter(geo, math.MaxInt64)
			buckets := map[int64]int64{}
			newest := r.Int64N(1<<40) - 1<<39
			for i := range 20000 {
				var tm int64
				if r.IntN(3) == 0 {
					newest += r.Int64N(W / 3)
					tm = newest
				} else {
					tm = newest - r.Int64N(W+1) // back by up to a window
				}
				if r.IntN(2) == 0 {
					n := 1 + r.Int64N(3)
					c.Add(tm, n)
					buckets[floorDiv(tm, w)] += n
					continue
				}
				k := floorDiv(tm, w)
				var want float64
				if geo.Fixed() {
					want = float64(buckets[k])
				} else {
					want = (1 - float64(tm-k*w)/float64(w)) * float64(buckets[k-B])
					for j := k - B + 1; j <= k; j++ {
						want += float64(buckets[j])
					}
				}
				got := c.Estimate(tm)
				if math.Abs(got-want) > boundEps(want) {
					require.Failf(t, "estimate after time went back", "op %d: t = newest − %d (%.2f sub-windows): E=%v, formula %v",
						i, newest-tm, float64(newest-tm)/float64(w), got, want)
				}
			}
		})
	}
}

// TestCounterBackOneWindowCase is the smallest case of TestCounterTimeGoesBack.
func TestCounterBackOneWindowCase(t *testing.T) {
	t.Parallel()
	geo := window.NewWeighted(time.Second, 10) // w = 100ms
	w := geo.Sub()
	for back := int64(0); back <= 10; back++ {
		t.Run(fmt.Sprint("back ", back, " sub-windows"), func(t *testing.T) {
			t.Parallel()
			c := reference.NewCounter(geo, 100)
			for j := int64(0); j <= 20; j++ {
				c.Add(j*w+w/2, 1) // one event in the middle of each bucket 0..20
			}
			// At the middle of any bucket k ≥ 10: 10 whole buckets and half of c[k−10].
			assert.InDelta(t, 10.5, c.Estimate(20*w+w/2-back*w), 1e-9)
		})
	}
}

func TestCounterCount(t *testing.T) {
	t.Parallel()
	geo := window.NewWeighted(time.Second, 2) // w = 500ms, ring of 5 slots
	c := reference.NewCounter(geo, 10)
	assert.Zero(t, c.Count(0), "empty")
	assert.Zero(t, c.Count(-1<<62), "empty slots hold no real bucket")
	c.Add(0, 3)
	c.Add(499*msec, 2)
	c.Add(-1, 4) // bucket −1
	assert.Equal(t, int64(5), c.Count(0))
	assert.Equal(t, int64(4), c.Count(-1))
	assert.Zero(t, c.Count(1))
	// Move far ahead: the old buckets are no longer held.
	c.Add(100*sec, 1) // bucket 200, slot 0
	assert.Equal(t, int64(1), c.Count(200))
	assert.Zero(t, c.Count(0), "bucket 0 dropped: its slot now holds bucket 200")
	// A slot reused by a later bucket starts from zero.
	for j := int64(201); j < 220; j++ {
		c.Add(j*500*msec, 1)
		assert.Equal(t, int64(1), c.Count(j))
	}
}

// TestCounterAllowCost checks Allow with costs against E + n ≤ limit.
func TestCounterAllowCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		geo  window.Sliding
		reqs []event
		want []bool
	}{
		{"n > limit", window.NewWeighted(time.Second, 10), []event{{0, 11}}, []bool{false}},
		{"n = limit", window.NewWeighted(time.Second, 10), []event{{0, 10}, {1, 1}}, []bool{true, false}},
		{"denied does not count", window.NewWeighted(time.Second, 10), []event{{0, 6}, {1, 5}, {2, 4}}, []bool{true, false, true}},
		{"zero cost", window.NewWeighted(time.Second, 10), []event{{0, 10}, {1, 0}}, []bool{true, true}},
		// B=1: 10 at 0; at 1.5s E = 5.
		{"weighted room", window.NewWeighted(time.Second, 1), []event{{0, 10}, {3 * sec / 2, 6}, {3 * sec / 2, 5}}, []bool{true, false, true}},
		{"fixed resets", window.NewFixed(time.Second), []event{{sec - 1, 10}, {sec - 1, 1}, {sec, 10}}, []bool{true, false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := reference.NewCounter(tt.geo, 10)
			for i, q := range tt.reqs {
				assert.Equal(t, tt.want[i], c.Allow(q.t, q.n), "request %d %+v", i, q)
			}
		})
	}
}
