package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// hungLimiter starts a throwaway store and a limiter on it with opts, behind
// a go-redis client at its defaults (the ones a user starts with), for rule
// api: 100 a minute, whose default budget gives no unsynced unit (cap
// ⌊0.01·100/2⌋ = 0): every check asks the store. The store is resumed before
// the limiter closes (Close needs it), in case a test leaves it paused.
func hungLimiter(t *testing.T, opts sluice.Options) (*redistest.Server, *sluice.Limiter) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	opts.Redis = rdb
	l, err := sluice.New(opts, policy.Rule{Name: "api", Limit: 100, Window: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	t.Cleanup(srv.Resume) // runs first
	return srv, l
}

// TestHungStoreDefaultClient: a store that hangs (SIGSTOP) behind a default
// go-redis client, whose socket reads ignore context deadlines, is judged
// down by sluice's own deadline (three checks in a row unanswered within
// Timeout) instead of after the client's seconds (its 3 s read timeout):
// FailLocal then admits the instance's share, FailOpen admits everything,
// and the store is healthy again once it resumes.
func TestHungStoreDefaultClient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode     policy.FailureMode
		min, max int  // admitted in the checks while the store hangs
		all      bool // every check admitted (min and max unused)
	}{
		// The share L/N̂ = 100, of which the store already counted 10:
		// the instance's part of what its last pull left, which also
		// counts the units Redis leased it and it had not used yet (their
		// number follows the timing of the ten checks' syncs: 60–90
		// admitted in -race runs; the test asks for at least half of 90).
		{mode: policy.FailLocal, min: 45, max: 90},
		{mode: policy.FailOpen, all: true},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			srv, l := hungLimiter(t, sluice.Options{FailureMode: tc.mode})
			ctx := context.Background()
			for range 10 {
				d, err := l.Allow(ctx, "api", "k")
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}

			srv.Pause()
			start := time.Now()
			down := time.Duration(-1)
			admitted, checks := 0, 0
			// 1.5 s of checks, and on until the store is judged down, up
			// to 2.9 s: a CPU-starved machine makes up to doubtsDown
			// probes inconclusive (silentDown and probeWait each: 2.25 s
			// at the defaults), still before the client's read timeout.
			// Then 300 ms more: until judged down each check waits its
			// Timeout, so a store judged down late (2 s in a -race run of
			// six parallel tests) left the loop a few checks, not the
			// share's worth.
			for el := time.Duration(0); el < 1500*time.Millisecond || down < 0 && el < 2900*time.Millisecond || down >= 0 && el < down+300*time.Millisecond; el = time.Since(start) {
				d, err := l.Allow(ctx, "api", "k")
				require.NoError(t, err)
				checks++
				if d.Allowed {
					admitted++
				}
				if down < 0 && l.Stats().Degraded {
					down = time.Since(start)
				}
				time.Sleep(time.Millisecond)
			}
			t.Logf("%v: %d of %d checks admitted while the store hung; judged down after %v", tc.mode, admitted, checks, down)
			// Judged down before the client's own read timeout could
			// have told.
			require.GreaterOrEqual(t, down, time.Duration(0), "a hung store is judged down")
			if tc.all {
				require.Equal(t, checks, admitted)
			} else {
				require.GreaterOrEqual(t, admitted, tc.min)
				require.LessOrEqual(t, admitted, tc.max)
			}

			srv.Resume()
			require.Eventually(t, func() bool { _ = l.Flush(ctx); return !l.Stats().Degraded },
				15*time.Second, 50*time.Millisecond, "healthy again once the store resumes")
		})
	}
}

// TestTimeoutWithinShare: under FailLocal, a check of a tracked key that the
// store, up but slow, does not answer within Timeout is decided as if the
// store were down: admitted within the instance's part of the room, not
// denied. Once the store answers again, it counts that admission once,
// whether or not it admitted the reservation too when it woke up.
func TestTimeoutWithinShare(t *testing.T) {
	t.Parallel()
	srv, l := hungLimiter(t, sluice.Options{FailureMode: policy.FailLocal, Timeout: 200 * time.Millisecond})
	ctx := context.Background()
	// 90 admitted: the room left (10) is the last tenth of the limit, which
	// the store never leases, so the next check goes to the store.
	for range 90 {
		d, err := l.Allow(ctx, "api", "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	require.NoError(t, l.Flush(ctx))

	srv.Pause()
	start := time.Now()
	d, err := l.Allow(ctx, "api", "k") // one check: the store is not judged down
	waited := time.Since(start)
	require.NoError(t, err)
	require.True(t, d.Allowed, "within the share, not denied")
	require.GreaterOrEqual(t, waited, 200*time.Millisecond, "it waited for the store")
	require.False(t, l.Stats().Degraded)
	srv.Resume()

	require.Eventually(t, func() bool {
		if err := l.Flush(ctx); err != nil {
			return false
		}
		p, err := l.Peek("api", "k")
		return err == nil && p.Remaining == 100-91
	}, 15*time.Second, 50*time.Millisecond, "the store counts 91: the timed-out check once")
}
