package syncer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestStarvedSilenceIsNoHang: the store's silence is taken for a hang only
// when the process ran on time meanwhile: after a late Pulse (a starved
// process), timeouts start no probe until silentDown has passed; then they
// do, and a live store answers it, a hung one does not and is judged down.
func TestStarvedSilenceIsNoHang(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := startSyncer(t, testConfig(srv.Client(t), "d"))
	quiet := func() {
		// Nothing answered for twice the deadline, and timeouts in a row.
		s.lastAnswer.Store(s.localNow() - 2*int64(s.silentDown()))
		s.timeouts.Store(timeoutsDown)
	}
	s.Pulse()
	time.Sleep(starveGap + 5*time.Millisecond)
	s.Pulse() // late: the process was starved
	require.Greater(t, s.starved.Load(), s.localNow())
	quiet()
	s.timedOut()
	require.False(t, s.probing.Load(), "a starved process proves nothing")

	s.starved.Store(s.localNow() - 1) // the starved spell is over
	quiet()
	s.timedOut()
	require.Eventually(t, func() bool { return !s.probing.Load() }, 5*time.Second, time.Millisecond)
	require.True(t, s.Healthy(), "the probe got its answer: a live store is not judged down")

	srv.Pause()
	t.Cleanup(srv.Resume)
	quiet()
	s.timedOut()
	require.True(t, s.probing.Load(), "a probe is out")
	require.Eventually(t, func() bool { return !s.Healthy() }, 5*time.Second, time.Millisecond, "a hung store is judged down")
}
