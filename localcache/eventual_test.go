package localcache

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// TestEventualCap: an Eventual instance admits Cap units on its own, then
// hands the key to the store (OverCap); once the syncer has acknowledged them
// it admits Cap more, until the window (with the other instances' totals) is
// full.
func TestEventualCap(t *testing.T) {
	t.Parallel()
	for _, g := range referenceGeometries {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			const limit, capv = 100, 15
			tb := mkTable(t, g.geo, limit, true)
			tb.setLimits(tableport.Limits{Cap: capv, Share: 50})
			require.Equal(t, tableport.Limits{Cap: capv, Share: 50}, tb.limits())
			store := newFakeStore()
			now := bucketStart(g.geo, 0) + 1
			var total int64
			for round := 0; ; round++ {
				prev := total
				got, v := admitUntil(t, tb, "k", now, 2*limit)
				total += got
				if prev+capv >= limit {
					// The window binds before the cap does.
					require.Equal(t, verdict.OverLimit, v.Status, "round %d", round)
					require.Equal(t, int64(limit), total)
					require.Zero(t, v.Remaining)
					require.Positive(t, v.RetryAfter)
					break
				}
				require.Equal(t, int64(capv), got, "round %d", round)
				require.Equal(t, verdict.OverCap, v.Status, "round %d", round)
				require.Equal(t, int64(limit)-total, v.Remaining, "OverCap still reports the window's room")
				est, own, ok := tb.estimate("k", now)
				require.True(t, ok)
				require.Equal(t, int64(capv), own)
				require.InDelta(t, float64(total), est, 1e-9)
				r, ok := tb.ref("k")
				require.True(t, ok)
				require.Equal(t, "k", tb.syncView().Key(r))
				require.Equal(t, int64(capv), pendingSum(tb, r, now))

				require.Equal(t, int64(capv), syncAll(tb, g.geo, store, now))
				est, own, _ = tb.estimate("k", now)
				require.Zero(t, own, "acknowledged counts leave pend")
				require.InDelta(t, float64(total), est, 1e-9, "and are counted in glob")
				require.Zero(t, pendingSum(tb, r, now))
			}
		})
	}
}

// TestEventualOtherInstances: totals pushed by other instances reduce what is
// left and make the window full.
func TestEventualOtherInstances(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 6)
	const limit = 100
	tb := mkTable(t, geo, limit, true)
	tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: limit})
	store := newFakeStore()
	now := bucketStart(geo, 0) + geo.Sub()/2
	k := geo.Index(now)

	v := tb.AllowAt("k", now, 10)
	require.Equal(t, verdict.Allowed, v.Status)
	require.Equal(t, int64(90), v.Remaining)
	store.add("k", k-1, 30) // another instance, earlier in the window
	store.add("k", k, 40)
	require.Equal(t, int64(10), syncAll(tb, geo, store, now))
	est, own, _ := tb.estimate("k", now)
	require.Equal(t, 80.0, est)
	require.Zero(t, own)

	v = tb.AllowAt("k", now, 5)
	require.Equal(t, verdict.Allowed, v.Status)
	require.Equal(t, int64(15), v.Remaining)
	v = tb.AllowAt("k", now, 16)
	require.Equal(t, verdict.OverLimit, v.Status, "only 15 left")
	require.Equal(t, int64(15), v.Remaining)
	ref := reference.NewCounter(geo, limit)
	ref.Add((k-1)*geo.Sub(), 30)
	ref.Add(now, 55)
	require.Equal(t, ref.RetryAfter(now, 16), int64(v.RetryAfter), "until enough of bucket k−1's 30 has left")
	require.Greater(t, v.RetryAfter, time.Duration(geo.Sub()*4))
	v = tb.AllowAt("k", now, 15)
	require.Equal(t, verdict.Allowed, v.Status)
	require.Zero(t, v.Remaining)
	require.Equal(t, verdict.OverLimit, tb.AllowAt("k", now, 1).Status)

	// Totals outside this instance's window are ignored.
	r, _ := tb.ref("k")
	tb.syncView().Settle(r, now, nil, k+1, []int64{1000}, Bucket{})
	tb.syncView().Settle(r, now, nil, k-int64(geo.Span())-2, []int64{1000, 1000}, Bucket{})
	est, _, _ = tb.estimate("k", now)
	require.Equal(t, 100.0, est)

	// A later sync showing the other instance's count lower (it was only
	// ever an estimate) frees room at once.
	require.Equal(t, int64(20), syncAll(tb, geo, store, now))
	require.Equal(t, verdict.OverLimit, tb.AllowAt("k", now, 1).Status)
	store.add("k", k, -40)
	require.Empty(t, tb.syncView().Drain(nil))
	tb.syncView().MarkDirty(r)
	syncAll(tb, geo, store, now)
	v = tb.AllowAt("k", now, 40)
	require.Equal(t, verdict.Allowed, v.Status)
}

// TestEventualConcurrentCap: goroutines racing for one key never take its
// unacknowledged count past Cap, with or without a syncer acknowledging
// counts concurrently, and with a syncer every admitted unit is either acked
// or still pending.
func TestEventualConcurrentCap(t *testing.T) {
	t.Parallel()
	for _, syncing := range []bool{false, true} {
		t.Run(fmt.Sprintf("syncing=%v", syncing), func(t *testing.T) {
			t.Parallel()
			geo := window.NewSliding(time.Minute, 4)
			const limit, capv = 1 << 20, 25
			tb := mkTable(t, geo, limit, true)
			tb.setLimits(tableport.Limits{Cap: capv, Share: limit})
			store := newFakeStore()
			now := bucketStart(geo, 0)
			var admitted, acked, overCap atomic.Int64
			for step := 0; step < 12; step++ {
				now += geo.Sub() / 3
				var stop atomic.Bool
				var wg sync.WaitGroup
				if syncing {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for !stop.Load() {
							acked.Add(syncAll(tb, geo, store, now))
						}
					}()
				}
				hammer(func(int) {
					for i := 0; i < 200; i++ {
						switch v := tb.AllowAt("hot", now, 1); v.Status {
						case verdict.Allowed:
							admitted.Add(1)
						case verdict.OverCap:
							overCap.Add(1)
						default:
							t.Errorf("unexpected %v", v.Status)
						}
					}
				})
				stop.Store(true)
				wg.Wait()
				r, _ := tb.ref("hot")
				own := ownCount(tb, "hot", now)
				require.LessOrEqual(t, own, int64(capv), "step %d", step)
				require.Equal(t, own, pendingSum(tb, r, now), "step %d", step)
				require.Positive(t, overCap.Load(), "the cap was reached")
				if !syncing {
					require.Equal(t, int64(capv), admitted.Load())
					return
				}
				require.Equal(t, admitted.Load(), acked.Load()+own, "step %d: admitted = acked + pending", step)
			}
			acked.Add(syncAll(tb, geo, store, now))
			require.Equal(t, admitted.Load(), acked.Load())
			t.Logf("admitted %d units with cap %d", admitted.Load(), capv)
		})
	}
}

// TestSetLimitsInvalidatesBudgets: limits bind from the next check, on both
// Allow (time from Tick) and AllowAt, though the old budgets are cached.
func TestSetLimitsInvalidatesBudgets(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 3)
	now := bucketStart(geo, 0) + 7
	for _, viaTick := range []bool{false, true} {
		t.Run(fmt.Sprintf("tick=%v", viaTick), func(t *testing.T) {
			t.Parallel()
			tb := mkTable(t, geo, 1000, true)
			tb.tick(now)
			allow := func(n int64) verdict.Status {
				if viaTick {
					return tb.Allow("k", n).Status
				}
				return tb.AllowAt("k", now, n).Status
			}
			tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: 1000})
			for i := 0; i < 50; i++ {
				require.Equal(t, verdict.Allowed, allow(1))
			}
			tb.setLimits(tableport.Limits{Cap: 50, Share: 1000})
			require.Equal(t, verdict.OverCap, allow(1), "a lowered cap binds at once")
			tb.setLimits(tableport.Limits{Cap: 60, Share: 1000})
			for i := 0; i < 10; i++ {
				require.Equal(t, verdict.Allowed, allow(1), "a raised cap frees room at once")
			}
			require.Equal(t, verdict.OverCap, allow(1))
			tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: 1000, Down: true, Mode: policy.FailClosed})
			require.Equal(t, verdict.StoreDown, allow(1))
			tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: 70, Down: true, Mode: policy.FailLocal})
			for i := 0; i < 10; i++ {
				require.Equal(t, verdict.Allowed, allow(1))
			}
			require.Equal(t, verdict.OverLimit, allow(1), "the share binds at once")
			tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: 70})
			require.Equal(t, verdict.Allowed, allow(1))
		})
	}
}
