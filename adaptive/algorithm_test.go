package adaptive_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/adaptive"
)

// TestAIMD: one decrease per round trip, an increase of Increase per
// limit's worth of successes, none while the limit is not in use.
func TestAIMD(t *testing.T) {
	t.Parallel()
	t0 := epoch
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		samples []adaptive.Sample
		want    float64
	}{
		{"slow: one decrease", []adaptive.Sample{{Start: t0, RTT: 60 * ms, InFlight: 100}}, 90},
		{"dropped: one decrease", []adaptive.Sample{{Start: t0, RTT: ms, InFlight: 100, Dropped: true}}, 90},
		{"slow ones admitted before the decrease: still one", []adaptive.Sample{
			{Start: t0, RTT: 60 * ms, InFlight: 100},
			{Start: t0.Add(10 * ms), RTT: 60 * ms, InFlight: 100},
			{Start: t0.Add(59 * ms), RTT: 60 * ms, InFlight: 100, Dropped: true},
		}, 90},
		{"one admitted after the decrease: a second", []adaptive.Sample{
			{Start: t0, RTT: 60 * ms, InFlight: 100},
			{Start: t0.Add(61 * ms), RTT: 60 * ms, InFlight: 100},
		}, 81},
		{"100 successes with the limit in use: +1", func() []adaptive.Sample {
			s := make([]adaptive.Sample, 100)
			for i := range s {
				s[i] = adaptive.Sample{Start: t0, RTT: 10 * ms, InFlight: 80}
			}
			return s
		}(), 101},
		{"successes with under half the limit in flight: no change", []adaptive.Sample{
			{Start: t0, RTT: 10 * ms, InFlight: 49},
			{Start: t0, RTT: 10 * ms, InFlight: 1},
		}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := &adaptive.AIMD{Threshold: 50 * ms}
			limit := 100.0
			for _, s := range tc.samples {
				limit = a.Update(limit, s)
			}
			assert.InDelta(t, tc.want, limit, 0.05)
		})
	}
}

// TestGradient2 feeds whole windows of one latency after a steady
// baseline of 10 ms and checks the direction and size of the move.
func TestGradient2(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		latency  time.Duration
		inflight int64
		dropped  bool
		want     func(t *testing.T, before, after float64)
	}{
		{"within tolerance: grows by Smoothing·Queue", 14 * ms, 100, false, func(t *testing.T, b, a float64) {
			assert.InDelta(t, b+0.8, a, 1e-9)
		}},
		{"doubled: falls towards limit·0.75+Queue", 20 * ms, 100, false, func(t *testing.T, b, a float64) {
			assert.InDelta(t, 0.8*b+0.2*(b*0.75+4), a, 0.5) // the average moved a little towards 20 ms
			assert.Less(t, a, b)
		}},
		{"tenfold: the gradient stops at 0.5", 100 * ms, 100, false, func(t *testing.T, b, a float64) {
			assert.InDelta(t, 0.8*b+0.2*(b*0.5+4), a, 1e-9)
		}},
		{"dropped: halves without headroom", 10 * ms, 100, true, func(t *testing.T, b, a float64) {
			assert.InDelta(t, 0.9*b, a, 1e-9)
		}},
		{"limit not in use: no change", 100 * ms, 10, false, func(t *testing.T, b, a float64) {
			assert.Equal(t, b, a)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := &adaptive.Gradient2{}
			limit := 100.0
			now := epoch
			window := func(lat time.Duration, inflight int64, dropped bool) {
				// 10 requests, the last one ending a window.
				for range 10 {
					limit = g.Update(limit, adaptive.Sample{Start: now, RTT: lat, InFlight: inflight, Dropped: dropped})
					now = now.Add(10 * ms)
				}
			}
			for range 20 { // the baseline: the long-term average at 10 ms
				window(10*ms, 100, false)
			}
			before := limit
			window(tc.latency, tc.inflight, tc.dropped)
			tc.want(t, before, limit)
		})
	}
}
