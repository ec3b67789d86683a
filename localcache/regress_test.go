package localcache

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// TestBudgetTagAfterSetLimits: a budget's tag must name one (bucket,
// generation) pair. With tag = bucket + generation, the budget a check at
// bucket k+1 caches under generation g is valid, after one SetLimits, for
// bucket k under g+1: a check whose clock is a moment behind (AllowAt from
// another goroutine, or Allow before the next Tick) then used bucket k+1's
// budget on bucket k's slot, adding to a word still tagged with an old bucket
// (the admissions were not counted), and with the old limits.
func TestBudgetTagAfterSetLimits(t *testing.T) {
	t.Parallel()
	t.Run("Local", func(t *testing.T) {
		t.Parallel()
		geo := window.NewFixed(time.Minute)
		const limit = 10
		tb := mkTable(t, geo, limit, false)
		ref := reference.NewCounter(geo, limit)
		tk := bucketStart(geo, 0) + geo.Sub() - 1 // last ns of bucket k
		require.Equal(t, verdict.Allowed, tb.AllowAt("a", tk+1, 1).Status)
		require.True(t, ref.Allow(tk+1, 1))
		tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: limit}) // any change of limits
		for i := 0; i < 3*limit; i++ {
			want := ref.Allow(tk, 1)
			require.Equal(t, want, tb.AllowAt("a", tk, 1).Status == verdict.Allowed, "check %d at bucket k", i)
			est, _, _ := tb.estimate("a", tk)
			require.Equal(t, ref.Estimate(tk), est, "check %d: admissions are counted", i)
		}
	})
	t.Run("Eventual cap", func(t *testing.T) {
		t.Parallel()
		geo := window.NewSliding(time.Minute, 2)
		tb := mkTable(t, geo, 1000, true)
		tk := bucketStart(geo, 0) + geo.Sub() - 1
		tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: 1000})
		require.Equal(t, verdict.Allowed, tb.AllowAt("a", tk+1, 1).Status)
		tb.setLimits(tableport.Limits{Cap: 3, Share: 1000})
		admitted := 0
		for i := 0; i < 10; i++ {
			if tb.AllowAt("a", tk, 1).Status == verdict.Allowed {
				admitted++
			}
		}
		// Bucket k+1 is not in bucket k's window: the cap allows 3 there.
		require.Equal(t, 3, admitted)
		require.Equal(t, int64(3), ownCount(tb, "a", tk))
	})
}

// TestSetLimitsRacingTick: SetLimits bumps the generation and republishes the
// time; a Tick running at the same moment (the limiter's ticker goroutine)
// that read the generation before the bump used to store its position last,
// so that Allow kept accepting budgets cached under the old limits until the
// next Tick: a lowered cap did not bind once SetLimits had returned.
func TestSetLimitsRacingTick(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 1)
	tb := mkTable(t, geo, 1<<30, true)
	now := bucketStart(geo, 0)
	tb.tick(now)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			tb.tick(now)
		}
	}()
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	r, _ := tb.ref("k")
	// The race window is a few instructions wide: before the fix this
	// failed within about 10⁵ iterations; bound the run by time as well.
	deadline := time.Now().Add(1500 * time.Millisecond)
	if testing.Short() {
		deadline = time.Now().Add(200 * time.Millisecond)
	}
	for i := 0; i < 300_000 && time.Now().Before(deadline); i++ {
		tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: 1})
		require.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status) // caches a budget
		require.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status)
		tb.setLimits(tableport.Limits{Cap: 0, Share: 1})
		if v := tb.Allow("k", 1); !assert.Equal(t, verdict.OverCap, v.Status, "iteration %d: cap 0 set, yet", i) {
			return
		}
		tb.syncView().Settle(r, now, tb.syncView().Pending(r, now, nil), oldest(geo, geo.Index(now)), nil, Bucket{})
	}
}

// TestSettleRacingPlan: a check's slow path scans the ring and then stores
// the budget it computed; a Settle that raised the totals (the window is now
// full) could run entirely in between, and the check's budget, computed from
// the old totals, then outlived the Settle: later checks passed the fast path
// against it until the next bucket, sync or SetLimits, although this instance
// had been told the window was full.
func TestSettleRacingPlan(t *testing.T) {
	t.Parallel()
	geo := window.NewFixed(time.Minute)
	now := bucketStart(geo, 0)
	k := geo.Index(now)
	tb := mkTable(t, geo, 100, true)
	tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: 100})
	// The window is narrow (the whole Settle must fit between a scan and
	// its store): before the fix this failed after some 10⁴ rounds, sooner
	// with -race.
	deadline := time.Now().Add(1500 * time.Millisecond)
	if testing.Short() {
		deadline = time.Now().Add(200 * time.Millisecond)
	}
	for round := 0; time.Now().Before(deadline); round++ {
		key := strconv.Itoa(round)
		r, _ := tb.ref(key)
		var stop atomic.Bool
		var wg sync.WaitGroup
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					// Always denied (n > Limit), always through the slow
					// path, which caches a budget of 100 until the Settle.
					tb.AllowAt(key, now, 1000)
					runtime.Gosched()
				}
			}()
		}
		runtime.Gosched()
		tb.syncView().Settle(r, now, nil, k, []int64{100}, Bucket{}) // other instances filled the window
		stop.Store(true)
		wg.Wait()
		if v := tb.AllowAt(key, now, 1); !assert.NotEqual(t, verdict.Allowed, v.Status, "round %d: the window is full", round) {
			return
		}
	}
}

// TestSettleKeepsCountsTheStoreDropped: an instance whose clock runs a little
// behind the store's pushes counts for a bucket the store has already left
// (a fixed window's previous window); the store drops them and acknowledges
// them. The instance must keep them in its view: if they left pend without
// reaching glob, it would admit them again in that window.
func TestSettleKeepsCountsTheStoreDropped(t *testing.T) {
	t.Parallel()
	geo := window.NewFixed(time.Second)
	tb := mustTable(t, Config{Geometry: geo, Limit: 10, Eventual: true, Keys: NewKeys(10)})
	tb.setLimits(tableport.Limits{Cap: 10, Share: 10})
	now := bucketStart(geo, 0) + geo.Sub() - 1 // last ns of bucket k on our clock
	k := geo.Index(now)
	for range 10 {
		require.Equal(t, verdict.Allowed, tb.AllowAt("a", now, 1).Status)
	}
	ref, ok := tb.ref("a")
	require.True(t, ok)
	acked := tb.syncView().Pending(ref, now, nil)
	require.Equal(t, []Bucket{{Index: k, Count: 10}}, acked)
	// The store is already in bucket k+1: it returns only that bucket.
	tb.syncView().Settle(ref, now, acked, k+1, []int64{0}, Bucket{})
	est, own, _ := tb.estimate("a", now)
	assert.Equal(t, 10.0, est, "the dropped counts stay in the view")
	assert.Zero(t, own, "and leave pend")
	assert.Equal(t, verdict.OverLimit, tb.AllowAt("a", now, 1).Status)
}
