package localcache

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/window"
)

// TestTryAllowRacingSyncer runs the limiter's check path (TryAllow, then
// Allow when it declines) against a simulated syncer: the store must get
// exactly what was admitted. An add-then-undo in the fast path let the syncer
// push a count that was then taken back (the store counted one more than was
// admitted, under contention at the cap).
func TestTryAllowRacingSyncer(t *testing.T) {
	t.Parallel()
	for _, capv := range []int64{NoCap, 7} {
		geo := window.NewSliding(time.Minute, 4)
		const keys = 40
		tb := mkTable(t, geo, 1<<30, true)
		tb.SetLimits(Limits{Cap: capv, Share: 1 << 30, Health: Healthy})
		store := newFakeStore()
		now := bucketStart(geo, 0) + 17
		tb.Tick(now)
		var admitted [keys]atomic.Int64
		var acked atomic.Int64
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				for _, r := range tb.Drain(nil) {
					acked.Add(syncRef(tb, geo, store, r, now))
				}
			}
		}()
		hammer(func(gi int) {
			rng := rand.New(rand.NewPCG(uint64(gi), 3))
			for i := 0; i < 3000; i++ {
				k := rng.IntN(keys)
				n := 1 + rng.Int64N(3)
				key := fmt.Sprint("key-", k)
				switch _, r := tb.TryAllow(key, n); r {
				case TryAllowed:
					admitted[k].Add(n)
					continue
				case TryDenied:
					continue
				}
				if v := tb.Allow(key, n); v.Status == Allowed {
					admitted[k].Add(n)
				}
			}
		})
		stop.Store(true)
		wg.Wait()
		var total, pending int64
		for k := range admitted {
			total += admitted[k].Load()
			r, _ := tb.Ref(fmt.Sprint("key-", k))
			pending += pendingSum(tb, r, now)
		}
		require.Equal(t, total, acked.Load()+pending, "cap %d: admitted = acked + pending", capv)
	}
}

// TestTryAllowCachesDenials: a key denied for cost 1 is denied again by
// TryAllow without the slow path, with the same RetryAfter (to the µs), until
// that time, a Settle or a SetLimits.
func TestTryAllowCachesDenials(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Second, 10)
	tb := mkTable(t, geo, 10, false)
	now := bucketStart(geo, 0) + 3*geo.Sub()/10
	tb.Tick(now)
	for range 10 {
		_, r := tb.TryAllow("k", 1)
		if r == TryUnknown {
			require.Equal(t, Allowed, tb.Allow("k", 1).Status)
		}
	}
	v := tb.Allow("k", 1)
	require.Equal(t, OverLimit, v.Status)
	require.Positive(t, v.RetryAfter)
	ra, r := tb.TryAllow("k", 1)
	require.Equal(t, TryDenied, r)
	assert.InDelta(t, float64(v.RetryAfter), float64(ra), float64(time.Microsecond))
	_, r = tb.TryAllow("k", 2)
	assert.Equal(t, TryUnknown, r, "other costs take the exact path")
	assert.Equal(t, OverLimit, tb.Allow("k", 2).Status)

	// Half way there: still denied, for half as long.
	tb.Tick(now + int64(v.RetryAfter)/2)
	ra2, r := tb.TryAllow("k", 1)
	if r == TryDenied { // the bucket may have turned: then the slow path decides
		assert.InDelta(t, float64(v.RetryAfter)/2, float64(ra2), float64(2*time.Microsecond))
	}

	// At the retry time the cached denial no longer holds, and the check passes.
	tb.Tick(now + int64(v.RetryAfter))
	_, r = tb.TryAllow("k", 1)
	assert.NotEqual(t, TryDenied, r)
	assert.Equal(t, Allowed, tb.Allow("k", 1).Status)
	_, _, ok := tb.Estimate("k", now)
	assert.True(t, ok)
}

// TestCachedDenialInvalidated: SetLimits (a new generation) and Settle (new
// totals) end a cached denial.
func TestCachedDenialInvalidated(t *testing.T) {
	t.Parallel()
	geo := window.NewFixed(time.Minute)
	tb := mkTable(t, geo, 5, true)
	tb.SetLimits(Limits{Cap: NoCap, Share: 5, Health: Healthy})
	now := bucketStart(geo, 0) + 1
	tb.Tick(now)
	for range 5 {
		require.Equal(t, Allowed, tb.Allow("k", 1).Status)
	}
	require.Equal(t, OverLimit, tb.Allow("k", 1).Status)
	_, r := tb.TryAllow("k", 1)
	require.Equal(t, TryDenied, r)

	tb.SetLimits(Limits{Cap: NoCap, Share: 5, Health: Healthy})
	_, r = tb.TryAllow("k", 1)
	assert.Equal(t, TryUnknown, r, "a new generation drops the cached denial")
	require.Equal(t, OverLimit, tb.Allow("k", 1).Status)
	_, r = tb.TryAllow("k", 1)
	require.Equal(t, TryDenied, r)

	// The store restarted empty: its totals for the key are 0 and it
	// acknowledged our 5: the window has room again.
	ref, ok := tb.Ref("k")
	require.True(t, ok)
	acked := tb.Pending(ref, now, nil)
	tb.Settle(ref, now, acked, geo.Index(now), []int64{0})
	_, r = tb.TryAllow("k", 1)
	assert.Equal(t, TryAllowed, r, "a Settle with room ends the cached denial")
}
