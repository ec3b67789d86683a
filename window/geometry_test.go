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

func TestNewGeometry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		geo     window.Sliding
		sub     int64
		buckets int
		fixed   bool
		span    int
		window  time.Duration
	}{
		{"sliding 1s/10", window.NewWeighted(time.Second, 10), 100 * msec, 10, false, 11, time.Second},
		{"sliding 1s/1", window.NewWeighted(time.Second, 1), sec, 1, false, 2, time.Second},
		{"sliding 1m/60", window.NewWeighted(time.Minute, 60), sec, 60, false, 61, time.Minute},
		{"sliding 7ns/7", window.NewWeighted(7, 7), 1, 7, false, 8, 7},
		{"sliding 1ns/1", window.NewWeighted(1, 1), 1, 1, false, 2, 1},
		{"fixed 1s", window.NewFixed(time.Second), sec, 1, true, 1, time.Second},
		{"fixed 1ns", window.NewFixed(1), 1, 1, true, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.sub, tt.geo.Sub(), "Sub")
			assert.Equal(t, tt.buckets, tt.geo.Buckets(), "Buckets")
			assert.Equal(t, tt.fixed, tt.geo.Fixed(), "Fixed")
			assert.Equal(t, tt.span, tt.geo.Span(), "Span")
			assert.Equal(t, tt.window, tt.geo.Window(), "Window")
		})
	}
}

func TestNewGeometryPanics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		window  time.Duration
		buckets int
		fixed   bool
	}{
		{"zero window", 0, 1, false},
		{"negative window", -time.Second, 1, false},
		{"zero buckets", time.Second, 0, false},
		{"negative buckets", time.Second, -10, false},
		{"not a multiple", time.Second, 7, false},
		{"fewer ns than buckets", 3, 4, false},
		{"fixed zero window", 0, 1, true},
		{"fixed negative window", -1, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := fmt.Sprintf("window: bad geometry %v / %d", tt.window, tt.buckets)
			assert.PanicsWithValue(t, want, func() {
				if tt.fixed {
					window.NewFixed(tt.window)
				} else {
					window.NewWeighted(tt.window, tt.buckets)
				}
			})
		})
	}
}

func TestIndexPhase(t *testing.T) {
	t.Parallel()
	sliding := window.NewWeighted(time.Second, 10) // w = 100ms
	fixed := window.NewFixed(time.Second)          // w = 1s
	tiny := window.NewWeighted(3, 3)               // w = 1ns: every time is a boundary
	const w = 100 * msec
	tests := []struct {
		name  string
		geo   window.Sliding
		t     int64
		k     int64
		phase float64
	}{
		{"sliding zero", sliding, 0, 0, 0},
		{"sliding 1ns", sliding, 1, 0, 1e-8},
		{"sliding last ns of bucket 0", sliding, w - 1, 0, float64(w-1) / float64(w)},
		{"sliding start of bucket 1", sliding, w, 1, 0},
		{"sliding middle of bucket 1", sliding, w + w/2, 1, 0.5},
		{"sliding start of bucket 10", sliding, 10 * w, 10, 0},
		{"sliding -1ns", sliding, -1, -1, float64(w-1) / float64(w)},
		{"sliding middle of bucket -1", sliding, -w / 2, -1, 0.5},
		{"sliding start of bucket -1", sliding, -w, -1, 0},
		{"sliding last ns of bucket -2", sliding, -w - 1, -2, float64(w-1) / float64(w)},
		{"sliding start of bucket -2", sliding, -2 * w, -2, 0},
		{"sliding MaxInt64", sliding, math.MaxInt64, math.MaxInt64 / w, float64(math.MaxInt64%w) / float64(w)},
		// k·w overflows int64 here, but wraps back to the right remainder.
		{"sliding MinInt64", sliding, math.MinInt64, math.MinInt64/w - 1, float64(w+math.MinInt64%w) / float64(w)},
		{"fixed zero", fixed, 0, 0, 0},
		{"fixed last ns of window 0", fixed, sec - 1, 0, float64(sec-1) / float64(sec)},
		{"fixed start of window 1", fixed, sec, 1, 0},
		{"fixed -1ns", fixed, -1, -1, float64(sec-1) / float64(sec)},
		{"fixed start of window -1", fixed, -sec, -1, 0},
		{"fixed last ns of window -2", fixed, -sec - 1, -2, float64(sec-1) / float64(sec)},
		{"tiny 0", tiny, 0, 0, 0},
		{"tiny 5", tiny, 5, 5, 0},
		{"tiny -5", tiny, -5, -5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.k, tt.geo.Index(tt.t), "Index(%d)", tt.t)
			assert.InDelta(t, tt.phase, tt.geo.Phase(tt.t), 1e-15, "Phase(%d)", tt.t)
			assert.GreaterOrEqual(t, tt.geo.Phase(tt.t), 0.0)
			assert.Less(t, tt.geo.Phase(tt.t), 1.0)
		})
	}
}

// TestIndexPhaseRandom checks Index and Phase against an independent floor
// division for random times of both signs, and that k·w ≤ t < (k+1)·w.
func TestIndexPhaseRandom(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	geos := []window.Sliding{
		window.NewWeighted(time.Second, 10), window.NewWeighted(time.Minute, 60), window.NewWeighted(7*time.Millisecond, 7),
		window.NewWeighted(time.Second, 1), window.NewFixed(time.Second), window.NewFixed(time.Hour), window.NewWeighted(3, 3),
	}
	for range 20000 {
		geo := geos[r.IntN(len(geos))]
		tm := r.Int64N(1<<50) - 1<<49
		k := geo.Index(tm)
		require.Equal(t, floorDiv(tm, geo.Sub()), k, "Index(%d) w=%d", tm, geo.Sub())
		require.LessOrEqual(t, k*geo.Sub(), tm)
		require.Less(t, tm, (k+1)*geo.Sub())
		ph := geo.Phase(tm)
		require.InDelta(t, float64(tm-k*geo.Sub())/float64(geo.Sub()), ph, 1e-15)
		require.True(t, ph >= 0 && ph < 1, "Phase(%d) = %v", tm, ph)
	}
}

func TestOldestOldWeight(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		geo    window.Sliding
		k      int64
		oldest int64
		phase  float64
		weight float64
	}{
		{"sliding B=10", window.NewWeighted(time.Second, 10), 25, 15, 0.25, 0.75},
		{"sliding B=10 negative", window.NewWeighted(time.Second, 10), -3, -13, 0, 1},
		{"sliding B=1", window.NewWeighted(time.Second, 1), 0, -1, 0.9, 0.1},
		{"sliding B=60", window.NewWeighted(time.Minute, 60), 60, 0, 0.5, 0.5},
		{"fixed", window.NewFixed(time.Second), 25, 25, 0.25, 1},
		{"fixed negative", window.NewFixed(time.Second), -7, -7, 0.99, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.oldest, tt.geo.Oldest(tt.k))
			assert.InDelta(t, tt.weight, tt.geo.OldWeight(tt.phase), 1e-15)
			// Oldest..k is Span() buckets.
			assert.Equal(t, int64(tt.geo.Span()), tt.k-tt.geo.Oldest(tt.k)+1)
		})
	}
}

func TestResetAfter(t *testing.T) {
	t.Parallel()
	sliding := window.NewWeighted(time.Second, 10) // w = 100ms
	const w = 100 * msec
	tests := []struct {
		name string
		geo  window.Sliding
		t    int64
		want time.Duration
	}{
		{"sliding 0", sliding, 0, 1100 * time.Millisecond},
		{"sliding 1ns", sliding, 1, 1100*time.Millisecond - 1},
		{"sliding last ns of bucket", sliding, w - 1, time.Second + 1},
		{"sliding start of bucket 1", sliding, w, 1100 * time.Millisecond},
		{"sliding -1ns", sliding, -1, time.Second + 1},
		{"sliding start of bucket -1", sliding, -w, 1100 * time.Millisecond},
		{"sliding B=1 0", window.NewWeighted(time.Second, 1), 0, 2 * time.Second},
		{"sliding B=1 mid", window.NewWeighted(time.Second, 1), sec / 4, 1750 * time.Millisecond},
		{"fixed 0", window.NewFixed(time.Second), 0, time.Second},
		{"fixed 1ns", window.NewFixed(time.Second), 1, time.Second - 1},
		{"fixed last ns", window.NewFixed(time.Second), sec - 1, 1},
		{"fixed start of window 1", window.NewFixed(time.Second), sec, time.Second},
		{"fixed -1ns", window.NewFixed(time.Second), -1, 1},
		{"fixed start of window -1", window.NewFixed(time.Second), -sec, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, tt.geo.ResetAfter(tt.t))
		})
	}
}

// TestResetAfterEmptiesCounter checks what ResetAfter means: one event counted
// at t still shows in the estimate 1ns before t+ResetAfter(t) and no longer at
// t+ResetAfter(t).
func TestResetAfterEmptiesCounter(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	geos := []window.Sliding{
		window.NewWeighted(time.Second, 10), window.NewWeighted(time.Second, 1), window.NewWeighted(time.Minute, 60),
		window.NewWeighted(10, 5), window.NewFixed(time.Second), window.NewFixed(3),
	}
	for range 5000 {
		geo := geos[r.IntN(len(geos))]
		tm := r.Int64N(1<<45) - 1<<44
		ra := int64(geo.ResetAfter(tm))
		if geo.Fixed() {
			require.True(t, ra > 0 && ra <= int64(geo.Window()), "fixed ResetAfter(%d) = %d", tm, ra)
		} else {
			require.True(t, ra > int64(geo.Window()) && ra <= int64(geo.Window())+geo.Sub(), "ResetAfter(%d) = %d", tm, ra)
		}
		c := reference.NewCounter(geo, 10)
		c.Add(tm, 1)
		require.Positive(t, c.Estimate(tm+ra-1), "geo %+v t=%d: still counted 1ns before reset", geo, tm)
		require.Zero(t, c.Estimate(tm+ra), "geo %+v t=%d: nothing counted at reset", geo, tm)
	}
}

// TestSlidingEstimateCalls checks that Estimate asks for exactly the Span()
// buckets Oldest(k)..k, once each, and weights only the oldest.
func TestSlidingEstimateCalls(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		geo  window.Sliding
		t    int64
		want float64
	}{
		// counts: bucket j holds j+100 (so every bucket is distinguishable).
		// B=4, w=1: at t=10 (φ=0) buckets 6..10 → 106·1 + 107+108+109+110.
		{"sliding phase 0", window.NewWeighted(4, 4), 10, 106 + 107 + 108 + 109 + 110},
		// B=2, w=4: t=9 → k=2, φ=1/4: 0.75·c[0] + c[1] + c[2].
		{"sliding phase 1/4", window.NewWeighted(8, 2), 9, 0.75*100 + 101 + 102},
		// B=2, w=4: t=-1 → k=-1, φ=3/4: 0.25·c[-3] + c[-2] + c[-1].
		{"sliding negative", window.NewWeighted(8, 2), -1, 0.25*97 + 98 + 99},
		// fixed, w=4: t=9 → k=2: c[2] only.
		{"fixed", window.NewFixed(4), 9, 102},
		{"fixed negative", window.NewFixed(4), -1, 99},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			calls := map[int64]int{}
			got := tt.geo.Estimate(tt.t, func(j int64) int64 { calls[j]++; return j + 100 })
			assert.InDelta(t, tt.want, got, 1e-9)
			k := tt.geo.Index(tt.t)
			require.Len(t, calls, tt.geo.Span())
			for j := tt.geo.Oldest(k); j <= k; j++ {
				assert.Equal(t, 1, calls[j], "bucket %d", j)
			}
		})
	}
}
