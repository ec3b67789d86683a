package syncer

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// overCap checks key on r's table (Cap 0) and returns the Ref to reserve with.
func overCap(t *testing.T, s *Syncer, r *testRule, key string) verdict.Ref {
	t.Helper()
	v := r.Table.AllowAt(key, s.Now(), 1)
	require.Equal(t, verdict.OverCap, v.Status)
	ref, ok := r.Table.Control().Ref(key)
	require.True(t, ok)
	return ref
}

// TestReserveAdmitsExactlyLimit sends reservations for one key from many
// goroutines: the store admits exactly Limit of them, the rest are denied
// with a RetryAfter, and the store counts exactly what it admitted.
func TestReserveAdmitsExactlyLimit(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	loadScript(t, c)
	cases := []struct {
		name string
		geo  window.Sliding
	}{
		{"sliding", midGeometry(10)},
		{"fixed", midGeometry(0)},
	}
	const limit = 37
	const goroutines, each = 32, 3
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRule(t, "strict", tc.geo, limit, 0)
			cfg := testConfig(c, "A"+strconv.Itoa(i))
			cfg.Prefix = "res" + strconv.Itoa(i)
			s := startSyncer(t, cfg, r)
			ref := overCap(t, s, r, "k")

			var mu sync.Mutex
			var results []syncport.Answer
			var wg sync.WaitGroup
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						res, err := r.Reserve(context.Background(), "k", ref, 1)
						if !assert.NoError(t, err) {
							return
						}
						mu.Lock()
						results = append(results, res)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			admitted := 0
			for _, a := range results {
				res := outcomeOf(r, a, 1)
				assert.Positive(t, res.ResetAfter)
				assert.GreaterOrEqual(t, res.Remaining, int64(0))
				assert.Less(t, res.Remaining, int64(limit))
				if a.Admitted {
					admitted++
					assert.Zero(t, res.RetryAfter)
				} else {
					assert.Positive(t, res.RetryAfter, "a denial says when to retry")
					assert.LessOrEqual(t, res.RetryAfter, res.ResetAfter)
					assert.Zero(t, res.Remaining)
				}
			}
			assert.Len(t, results, goroutines*each)
			assert.Equal(t, limit, admitted, "exactly the limit is admitted")
			assert.Equal(t, int64(limit), total(t, c, r.keyName("k")))
			st := s.Stats()
			assert.Equal(t, int64(goroutines*each), st.Reservations)
			assert.Positive(t, st.UrgentCycles)
			assert.Zero(t, st.Corrections)
			assert.Zero(t, st.Failures)

			// The reservations' replies refreshed the table (Flush waits
			// for the loop to have settled the last one): the window is
			// full locally too.
			flush(t, s)
			est, own := estimate(t, r.Table, "k", s.Now())
			assert.Equal(t, float64(limit), est)
			assert.Zero(t, own)
			assert.Equal(t, verdict.OverLimit, r.Table.AllowAt("k", s.Now(), 1).Status)

			// A cost above the limit never fits.
			res, err := r.Reserve(ctxT(t, opTimeout), "other", nil, limit+1)
			require.NoError(t, err)
			assert.False(t, res.Admitted)
			assert.Equal(t, time.Duration(-1), outcomeOf(r, res, limit+1).RetryAfter, "never")
			assert.Zero(t, total(t, c, r.keyName("other")))
		})
	}
}

// TestReservePushesPending checks that a reservation carries the key's
// pending counts in the same call, before it is decided.
func TestReservePushesPending(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	r := newRule(t, "api", midGeometry(4), 10, 6)
	s := startSyncer(t, testConfig(c, "A"), r)
	admit(t, s, r, "k", 6) // up to the cap, unsynced
	v := r.Table.AllowAt("k", s.Now(), 4)
	require.Equal(t, verdict.OverCap, v.Status)
	ref, _ := r.Table.Control().Ref("k")
	res, err := r.Reserve(ctxT(t, opTimeout), "k", ref, 4)
	require.NoError(t, err)
	assert.True(t, res.Admitted, "6 pushed + 4 reserved = 10 fits")
	assert.Zero(t, outcomeOf(r, res, 4).Remaining)
	assert.Equal(t, int64(10), total(t, c, r.keyName("k")))
	// The waiter is answered before the table is settled with the same
	// reply; a Flush waits for the loop to be done with it.
	flush(t, s)
	est, own := estimate(t, r.Table, "k", s.Now())
	assert.Zero(t, own, "the pending counts were acknowledged")
	assert.Equal(t, 10.0, est)

	res, err = r.Reserve(ctxT(t, opTimeout), "k", ref, 1)
	require.NoError(t, err)
	assert.False(t, res.Admitted)
	flush(t, s)
	assert.Equal(t, int64(10), total(t, c, r.keyName("k")))
}

// TestReserveErrors covers the errors that need no failing store.
func TestReserveErrors(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	r := newRule(t, "api", midGeometry(4), 10, 0)
	s := startSyncer(t, testConfig(c, "A"), r)

	// A rule of another syncer (same name, own table), never started.
	other := newRule(t, "api", r.geo, 10, 0)
	s2, err := newSyncer(testConfig(c, "B"), other)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s2.Close(context.Background()) })
	_, err = s.reserve(ctxT(t, opTimeout), other.windowRule, "k", nil, 1)
	assert.Error(t, err, "a rule the syncer does not know")
	_, err = s.reserve(ctxT(t, opTimeout), nil, "k", nil, 1)
	assert.Error(t, err, "no rule")

	// A caller that gives up before the reservation is sent has it never
	// decided; one that gives up after has it undone: either way the store
	// ends up counting nothing for it.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := r.Reserve(ctx, "k", nil, 1)
	var want int64
	if err == nil && res.Admitted {
		want = 1 // the answer won the race with the cancelled context
	} else {
		assert.ErrorIs(t, err, context.Canceled, "a cancelled context is reported as such")
	}
	flush(t, s)
	flush(t, s)
	assert.Equal(t, want, total(t, c, r.keyName("k")))

	require.NoError(t, s.Close(ctxT(t, opTimeout)))
	_, err = r.Reserve(ctxT(t, opTimeout), "k", nil, 1)
	assert.ErrorIs(t, err, syncport.ErrClosed)
}

// TestReservePausedStore freezes the store while a reservation is in flight:
// the caller gets syncport.ErrTimeout after about Config.Timeout and counts nothing
// (its fallback is simulated by not counting); the store executes the call
// once it resumes, and the syncer undoes that admission with a negative
// correction, so the store's total is exactly what callers were told was
// admitted.
func TestReservePausedStore(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// waitFail keeps the store frozen until the syncer's call has
		// failed (the store then executes it with nobody listening);
		// otherwise it resumes at once and the reply arrives late.
		waitFail bool
	}{
		{"late reply", false},
		{"lost reply", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			c := srv.Client(t)
			r := newRule(t, "strict", midGeometry(5), 100, 0)
			cfg := testConfig(c, "A")
			cfg.Timeout = 300 * time.Millisecond
			if tc.waitFail && testing.Short() {
				// The call fails when its round trip's deadline ends, at
				// once, rather than after the client's read timeouts and
				// retries (5-7 s).
				cfg.OpTimeout = time.Second
			}
			s := startSyncer(t, cfg, r)

			told := 0 // reservations callers were told were admitted
			for range 3 {
				res, err := r.Reserve(ctxT(t, opTimeout), "k", overCap(t, s, r, "k"), 1)
				require.NoError(t, err)
				require.True(t, res.Admitted)
				told++
			}

			ref := overCap(t, s, r, "k")
			srv.Pause()
			began := time.Now()
			_, err := r.Reserve(context.Background(), "k", ref, 1)
			took := time.Since(began)
			require.ErrorIs(t, err, syncport.ErrTimeout)
			assert.GreaterOrEqual(t, took, cfg.Timeout)
			assert.Less(t, took, 5*cfg.Timeout)
			if tc.waitFail {
				require.Eventually(t, func() bool { return s.Stats().Failures > 0 }, 30*time.Second, 10*time.Millisecond)
				assert.False(t, s.isHealthy())
			}
			srv.Resume()

			flush(t, s) // the late or lost reply is settled, a correction queued
			flush(t, s) // the correction is pushed
			assert.Equal(t, int64(told), total(t, c, r.keyName("k")), "the store counts what callers were told")
			assert.Equal(t, int64(1), s.Stats().Corrections, "the store did admit the abandoned reservation")
			est, own := estimate(t, r.Table, "k", s.Now())
			assert.Equal(t, float64(told), est)
			assert.Zero(t, own)
			assert.True(t, s.isHealthy())
		})
	}
}
