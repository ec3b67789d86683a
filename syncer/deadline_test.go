package syncer

import (
	"runtime"
	"runtime/metrics"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestStarvedSilenceIsNoHang: the store's silence is taken for a hang only
// when the process ran on time meanwhile: after a late pulse (a starved
// process), timeouts start no probe until silentDown has passed; then they
// do, and a live store answers it, a hung one does not and is judged down.
func TestStarvedSilenceIsNoHang(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := testConfig(srv.Client(t), "d")
	if testing.Short() {
		// Probes of 500 ms, not 2 s: the live store's answer still has
		// ample time.
		cfg.Timeout = 250 * time.Millisecond
	}
	s := startSyncer(t, cfg)
	// This test is about the pulses; the probe's own gate, the waits for a
	// CPU that a busy test run has plenty of, is TestStarvedProbeIsNoHang's.
	s.longWaits = func() uint64 { return 0 }
	quiet := func() {
		// Nothing answered for twice the deadline, and timeouts in a row.
		s.lastAnswer.Store(s.localNow() - 2*int64(s.silentDown()))
		s.timeouts.Store(timeoutsDown)
	}
	s.pulse()
	time.Sleep(starveGap + 5*time.Millisecond)
	s.pulse() // late: the process was starved
	require.Greater(t, s.starved.Load(), s.localNow())
	quiet()
	s.timedOut()
	require.False(t, s.probing.Load(), "a starved process proves nothing")

	s.starved.Store(s.localNow() - 1) // the starved spell is over
	quiet()
	s.timedOut()
	require.Eventually(t, func() bool { return !s.probing.Load() }, 5*time.Second, time.Millisecond)
	require.True(t, s.isHealthy(), "the probe got its answer: a live store is not judged down")

	srv.Pause()
	t.Cleanup(srv.Resume)
	quiet()
	s.timedOut()
	require.True(t, s.probing.Load(), "a probe is out")
	require.Eventually(t, func() bool { return !s.isHealthy() }, 5*time.Second, time.Millisecond, "a hung store is judged down")
}

// TestStarvedProbeIsNoHang: the probe that would judge a silent store down
// is inconclusive if goroutines waited starveGap or more for a CPU while it
// waited (the runtime's scheduling latencies): its reply may be waiting
// unread behind them. The store stays up, and silence counts for nothing
// for a while, as after a late pulse. Without such waits, a hung store is
// judged down.
func TestStarvedProbeIsNoHang(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		waits     func() func() uint64
		wantUp    bool
		wantStarv bool
	}{
		{"goroutines waited for a CPU during the probe", func() func() uint64 {
			var n atomic.Uint64
			return func() uint64 { return n.Add(1) }
		}, true, true},
		{"none did", func() func() uint64 {
			return func() uint64 { return 7 }
		}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			cfg := testConfig(srv.Client(t), "p")
			if testing.Short() {
				cfg.Timeout = 50 * time.Millisecond // probes of 250 ms, not 2 s: the store is paused
			}
			s := startSyncer(t, cfg)
			s.longWaits = tc.waits()
			srv.Pause()
			t.Cleanup(srv.Resume)
			s.lastAnswer.Store(s.localNow() - 2*int64(s.silentDown()))
			s.timeouts.Store(timeoutsDown)
			s.timedOut()
			require.True(t, s.probing.Load(), "a probe is out")
			require.Eventually(t, func() bool { return !s.probing.Load() }, 5*time.Second, time.Millisecond)
			require.Equal(t, tc.wantUp, s.isHealthy())
			require.Equal(t, tc.wantStarv, s.starved.Load() > s.localNow(), "silence counts for nothing for a while")
		})
	}
}

// TestProbeDoubtsEnd: waits for a CPU during every probe leave doubtsDown
// probes in a row inconclusive, not more: the next one that gets no answer
// judges a hung store down, however starved the process.
func TestProbeDoubtsEnd(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := testConfig(srv.Client(t), "b")
	cfg.Timeout = 50 * time.Millisecond // probes of 250 ms, all within the client's 3 s read timeout
	s := startSyncer(t, cfg)
	var n atomic.Uint64
	s.longWaits = func() uint64 { return n.Add(1) } // a wait in every probe
	// The test runs the probes itself, one after the other: the syncer's
	// own timeouts against the paused store start none meanwhile.
	s.starved.Store(s.localNow() + int64(time.Hour))
	srv.Pause()
	t.Cleanup(srv.Resume)
	for i := range doubtsDown + 1 {
		require.True(t, s.probing.CompareAndSwap(false, true))
		s.probe(timeoutsDown, s.silentDown())
		require.Equal(t, i < doubtsDown, s.isHealthy(), "after probe %d: %v", i+1, s.fleetView().Err)
	}
}

// TestLongWaits: the runtime this builds with has the scheduling-latency
// histogram longWaits reads (else the probe would fall back on silence
// alone), and its count never goes back.
func TestLongWaits(t *testing.T) {
	t.Parallel()
	i := slices.IndexFunc(metrics.All(), func(d metrics.Description) bool { return d.Name == schedLatencies })
	require.GreaterOrEqual(t, i, 0, "the runtime has %s", schedLatencies)
	require.Equal(t, metrics.KindFloat64Histogram, metrics.All()[i].Kind)
	a := longWaits()
	runtime.Gosched()
	require.GreaterOrEqual(t, longWaits(), a)
}
