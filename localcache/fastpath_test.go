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

	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// TestAllowRacingSyncer runs the limiter's check path (Allow: the fast path,
// then the slow one when it declines) against a simulated syncer: the store
// must get exactly what was admitted. An add-then-undo in the fast path let
// the syncer push a count that was then taken back (the store counted one
// more than was admitted, under contention at the cap).
func TestAllowRacingSyncer(t *testing.T) {
	t.Parallel()
	for _, capv := range []int64{tableport.NoCap, 7} {
		geo := window.NewSliding(time.Minute, 4)
		const keys = 40
		tb := mkTable(t, geo, 1<<30, true)
		tb.setLimits(tableport.Limits{Cap: capv, Share: 1 << 30})
		store := newFakeStore()
		now := bucketStart(geo, 0) + 17
		tb.tick(now)
		var admitted [keys]atomic.Int64
		var acked atomic.Int64
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				for _, r := range tb.syncView().Drain(nil) {
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
				if v := tb.Allow(key, n); v.Status == verdict.Allowed {
					admitted[k].Add(n)
				}
			}
		})
		stop.Store(true)
		wg.Wait()
		var total, pending int64
		for k := range admitted {
			total += admitted[k].Load()
			r, _ := tb.ref(fmt.Sprint("key-", k))
			pending += pendingSum(tb, r, now)
		}
		require.Equal(t, total, acked.Load()+pending, "cap %d: admitted = acked + pending", capv)
	}
}

// TestAllowCachesDenials: a key denied for cost 1 is denied again on the fast
// path (its cached denial), with the same RetryAfter (to the µs), until that
// time, a Settle or a SetLimits.
func TestAllowCachesDenials(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Second, 10)
	tb := mkTable(t, geo, 10, false)
	now := bucketStart(geo, 0) + 3*geo.Sub()/10
	tb.tick(now)
	for range 10 {
		require.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status)
	}
	v := tb.Allow("k", 1)
	require.Equal(t, verdict.OverLimit, v.Status)
	require.Positive(t, v.RetryAfter)
	ra := cachedDenialOf(tb, "k")
	require.Positive(t, ra, "the denial is cached")
	assert.InDelta(t, float64(v.RetryAfter), float64(ra), float64(time.Microsecond))
	v2 := tb.Allow("k", 1)
	require.Equal(t, verdict.OverLimit, v2.Status)
	assert.InDelta(t, float64(v.RetryAfter), float64(v2.RetryAfter), float64(time.Microsecond))
	assert.Equal(t, verdict.OverLimit, tb.Allow("k", 2).Status, "other costs take the exact path")

	// Half way there: still denied, for half as long.
	tb.tick(now + int64(v.RetryAfter)/2)
	if ra2 := cachedDenialOf(tb, "k"); ra2 > 0 { // the bucket may have turned: then the slow path decides
		assert.InDelta(t, float64(v.RetryAfter)/2, float64(ra2), float64(2*time.Microsecond))
		assert.InDelta(t, float64(v.RetryAfter)/2, float64(tb.Allow("k", 1).RetryAfter), float64(2*time.Microsecond))
	}

	// At the retry time the cached denial no longer holds, and the check passes.
	tb.tick(now + int64(v.RetryAfter))
	assert.Zero(t, cachedDenialOf(tb, "k"))
	assert.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status)
	_, _, ok := tb.estimate("k", now)
	assert.True(t, ok)
}

// TestCachedDenialInvalidated: SetLimits (a new generation) and Settle (new
// totals) end a cached denial.
func TestCachedDenialInvalidated(t *testing.T) {
	t.Parallel()
	geo := window.NewFixed(time.Minute)
	tb := mkTable(t, geo, 5, true)
	tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: 5})
	now := bucketStart(geo, 0) + 1
	tb.tick(now)
	for range 5 {
		require.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status)
	}
	require.Equal(t, verdict.OverLimit, tb.Allow("k", 1).Status)
	require.Positive(t, cachedDenialOf(tb, "k"))

	tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: 5})
	assert.Zero(t, cachedDenialOf(tb, "k"), "a new generation drops the cached denial")
	require.Equal(t, verdict.OverLimit, tb.Allow("k", 1).Status)
	require.Positive(t, cachedDenialOf(tb, "k"))

	// The store restarted empty: its totals for the key are 0 and it
	// acknowledged our 5: the window has room again.
	ref, ok := tb.ref("k")
	require.True(t, ok)
	acked := tb.syncView().Pending(ref, now, nil)
	tb.syncView().Settle(ref, now, acked, geo.Index(now), []int64{0}, Bucket{})
	assert.Zero(t, cachedDenialOf(tb, "k"), "a Settle with room ends the cached denial")
	assert.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status)
}

// cachedDenialOf returns how long key's cached denial of cost 1 holds at the
// last Tick, as Allow's fast path reads it: 0 if there is none.
func cachedDenialOf(tb *Table, key string) time.Duration {
	e := tb.m.Load(key)
	if e == nil {
		return 0
	}
	tag := int64(tb.pos.Load()>>24) & tagMask
	if rw := e.room.Load(); tagOf(rw) == tag {
		return cachedDenial(rw, tb.nowUs.Load())
	}
	return 0
}
