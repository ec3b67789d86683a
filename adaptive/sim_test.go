package adaptive_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adaptive"
)

// server is a simulated server: workers requests are served at once, each
// in service time; more queue, so a request admitted with n in flight
// takes service·max(1, n/workers).
type server struct {
	workers int
	service time.Duration
}

func (s server) latency(n int64) time.Duration {
	return time.Duration(float64(s.service) * max(1, float64(n)/float64(s.workers)))
}

// phase is a stretch of a simulation with one server.
type phase struct {
	name string
	srv  server
	dur  time.Duration
}

// phaseStats is what a simulation measured over the second half of a
// phase, once the limit had time to move.
type phaseStats struct {
	name                  string
	limitMean             float64
	limitMin, limitMax    int64
	latencyMean           time.Duration
	throughput            float64 // completions per second
	offered, shed         [adaptive.NumPriorities]int64
	maxInFlightOverLimit  int64 // in flight − limit just after an admission, at most
	samples, latencyCount int64
}

// arrivals is the priority mix of the simulation: 10 % critical, 50 %
// default, 40 % sheddable.
var arrivals = func() []adaptive.Priority {
	var ps []adaptive.Priority
	for i := range 10 {
		switch i {
		case 0:
			ps = append(ps, adaptive.Critical)
		case 1, 3, 5, 7:
			ps = append(ps, adaptive.Sheddable)
		default:
			ps = append(ps, adaptive.Default)
		}
	}
	return ps
}()

// simulate runs a limiter in front of the phases' servers on a virtual
// clock in steps of 1 ms: each step the requests whose latency has passed
// complete (Release Success), then 3 requests arrive and each is admitted
// or shed. It returns the statistics of each phase and the limit at the
// end of every second.
func simulate(t *testing.T, alg adaptive.Algorithm, phases []phase) ([]phaseStats, []int64) {
	t.Helper()
	clock := &virtualClock{}
	l, err := adaptive.New(adaptive.Options{Algorithm: alg, Min: 4, Max: 400, Initial: 20, Clock: clock})
	require.NoError(t, err)
	ctx := context.Background()
	const tick = time.Millisecond
	type req struct {
		slot adaptive.Slot
		lat  time.Duration
	}
	ring := make([][]req, 1<<14) // completions by tick; latencies stay below 16 s
	var trace []int64
	var out []phaseStats
	step := 0
	for _, ph := range phases {
		st := phaseStats{name: ph.name, limitMin: math.MaxInt64}
		steps := int(ph.dur / tick)
		var limitSum float64
		var latSum time.Duration
		for i := range steps {
			late := i >= steps/2
			due := ring[step%len(ring)]
			ring[step%len(ring)] = due[:0]
			for _, r := range due {
				r.slot.Release(adaptive.Success)
				if late {
					st.latencyCount++
					latSum += r.lat
				}
			}
			for k := range 3 {
				p := arrivals[(step*3+k)%len(arrivals)]
				s, err := l.Acquire(ctx, p)
				require.NoError(t, err)
				st1 := l.Stats()
				if late {
					st.offered[p]++
				}
				if !s.OK() {
					if late {
						st.shed[p]++
					}
					continue
				}
				st.maxInFlightOverLimit = max(st.maxInFlightOverLimit, st1.InFlight-st1.Limit)
				lat := ph.srv.latency(st1.InFlight)
				at := step + int(max(1, (lat+tick-1)/tick))
				ring[at%len(ring)] = append(ring[at%len(ring)], req{s, lat})
			}
			lim := l.Stats().Limit
			if late {
				st.samples++
				limitSum += float64(lim)
				st.limitMin = min(st.limitMin, lim)
				st.limitMax = max(st.limitMax, lim)
			}
			clock.Advance(tick)
			step++
			if step%1000 == 0 {
				trace = append(trace, lim)
			}
		}
		st.limitMean = limitSum / float64(st.samples)
		if st.latencyCount > 0 {
			st.latencyMean = latSum / time.Duration(st.latencyCount)
		}
		st.throughput = float64(st.latencyCount) / (ph.dur / 2).Seconds()
		out = append(out, st)
	}
	return out, trace
}

// latencyStep is a server of 40 workers at 20 ms (2000 requests/s at 40 in
// flight) that loses half its workers for 10 s: at the same load its
// latency doubles. The offered load, 3000 requests/s, exceeds it in every
// phase.
var latencyStep = []phase{
	{"before", server{workers: 40, service: 20 * time.Millisecond}, 10 * time.Second},
	{"step", server{workers: 20, service: 20 * time.Millisecond}, 10 * time.Second},
	{"after", server{workers: 40, service: 20 * time.Millisecond}, 10 * time.Second},
}

// TestLatencyStep: under a latency step the limit falls and settles, the
// latency of the admitted requests stays bounded, sheddable traffic is shed
// first, and when the server recovers so does the limit. Run it with -v for
// the figures of docs/concurrency.md.
func TestLatencyStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		alg  func() adaptive.Algorithm
	}{
		{"AIMD", func() adaptive.Algorithm { return &adaptive.AIMD{Threshold: 30 * time.Millisecond} }},
		{"Gradient2", func() adaptive.Algorithm { return &adaptive.Gradient2{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stats, trace := simulate(t, tc.alg(), latencyStep)
			logPhases(t, tc.name, stats, trace)
			before, step, after := stats[0], stats[1], stats[2]
			require.Less(t, step.limitMean, 0.75*before.limitMean, "the limit falls when latency doubles")
			require.Greater(t, after.limitMean, 1.3*step.limitMean, "the limit recovers")
			require.Greater(t, after.limitMean, 0.75*before.limitMean, "the limit recovers")
			for _, s := range stats {
				require.LessOrEqual(t, s.maxInFlightOverLimit, int64(0), "%s: admitted over the limit", s.name)
				require.Less(t, float64(s.limitMax-s.limitMin), s.limitMean, "%s: the limit settles", s.name)
				require.Less(t, s.latencyMean, 3*20*time.Millisecond, "%s: latency bounded", s.name)
				requireShedOrder(t, s)
			}
		})
	}
}

// slowerService is the server of latencyStep whose service time doubles
// for 10 s instead: its latency doubles at every load, and its capacity
// halves, but 40 requests in flight still keep all its workers busy.
var slowerService = []phase{
	{"before", server{workers: 40, service: 20 * time.Millisecond}, 10 * time.Second},
	{"slower", server{workers: 40, service: 40 * time.Millisecond}, 10 * time.Second},
	{"after", server{workers: 40, service: 20 * time.Millisecond}, 10 * time.Second},
}

// TestSlowerService: when the service time itself doubles, above AIMD's
// threshold even without queueing, AIMD takes every request as a drop and
// holds the limit at its floor, starving the server; Gradient2 takes the new
// latency as the new normal and keeps the server busy. Both recover after,
// and shed by priority throughout. Run it with -v for the figures of
// docs/concurrency.md.
func TestSlowerService(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		alg   func() adaptive.Algorithm
		check func(t *testing.T, before, slower, after phaseStats)
	}{
		{"AIMD", func() adaptive.Algorithm { return &adaptive.AIMD{Threshold: 30 * time.Millisecond} },
			func(t *testing.T, before, slower, after phaseStats) {
				require.Equal(t, int64(4), slower.limitMax, "the floor")
				require.Less(t, slower.throughput, 0.2*1000, "the server starved")
			}},
		{"Gradient2", func() adaptive.Algorithm { return &adaptive.Gradient2{} },
			func(t *testing.T, before, slower, after phaseStats) {
				require.Less(t, slower.limitMean, 0.75*before.limitMean, "the limit falls")
				require.Greater(t, slower.throughput, 0.9*1000, "the server kept busy")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stats, trace := simulate(t, tc.alg(), slowerService)
			logPhases(t, tc.name, stats, trace)
			before, slower, after := stats[0], stats[1], stats[2]
			tc.check(t, before, slower, after)
			require.Greater(t, after.limitMean, 0.75*before.limitMean, "the limit recovers")
			for _, s := range stats {
				require.LessOrEqual(t, s.maxInFlightOverLimit, int64(0), "%s: admitted over the limit", s.name)
				requireShedOrder(t, s)
			}
		})
	}
}

// logPhases logs a simulation's figures.
func logPhases(t *testing.T, name string, stats []phaseStats, trace []int64) {
	t.Helper()
	for _, s := range stats {
		t.Logf("%-9s %-6s limit mean %5.1f [%3d, %3d]  latency mean %5.1f ms  throughput %4.0f/s  shed critical %5.1f %%  default %5.1f %%  sheddable %5.1f %%",
			name, s.name, s.limitMean, s.limitMin, s.limitMax, float64(s.latencyMean)/1e6, s.throughput,
			pct(s.shed[adaptive.Critical], s.offered[adaptive.Critical]),
			pct(s.shed[adaptive.Default], s.offered[adaptive.Default]),
			pct(s.shed[adaptive.Sheddable], s.offered[adaptive.Sheddable]))
	}
	t.Logf("%-9s limit at the end of each second: %v", name, trace)
}

// requireShedOrder: over a phase, sheddable requests were refused at least
// as often as default ones, default ones at least as often as critical
// ones, and sheddable ones more often than critical ones.
func requireShedOrder(t *testing.T, s phaseStats) {
	t.Helper()
	shed := func(p adaptive.Priority) float64 { return pct(s.shed[p], s.offered[p]) }
	require.GreaterOrEqual(t, shed(adaptive.Sheddable), shed(adaptive.Default), s.name)
	require.GreaterOrEqual(t, shed(adaptive.Default), shed(adaptive.Critical), s.name)
	require.Greater(t, shed(adaptive.Sheddable), shed(adaptive.Critical), s.name)
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
