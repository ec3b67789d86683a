package localcache

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// TestHealth covers the failure modes of an Eventual table.
func TestHealth(t *testing.T) {
	t.Parallel()
	geo := window.NewWeighted(time.Minute, 1)
	const limit = 100
	t0 := bucketStart(geo, 0)

	t.Run("FailLocal enforces Share on own counts", func(t *testing.T) {
		t.Parallel()
		tb := mkTable(t, geo, limit, true)
		tb.setLimits(tableport.Limits{Cap: 5, Share: 30, Down: true, Mode: policy.FailLocal})
		got, v := admitUntil(t, tb, "k", t0, 1000)
		require.Equal(t, int64(30), got, "the cap does not apply while degraded; the share does")
		require.Equal(t, verdict.OverLimit, v.Status)
		require.Equal(t, int64(70), v.Remaining, "Remaining is the window's")
		// Only a share's worth: retry when the share's own window frees up.
		ref := reference.NewCounter(geo, 30)
		ref.Add(t0, 30)
		require.Equal(t, ref.RetryAfter(t0, 1), int64(v.RetryAfter))
		// Half a bucket later, half of the old bucket still counts.
		t1 := t0 + geo.Sub() + geo.Sub()/2
		got, _ = admitUntil(t, tb, "k", t1, 1000)
		require.Equal(t, int64(15), got)
		// A cost over the share can only wait for the reset.
		v = tb.AllowAt("k", t1, 31)
		require.Equal(t, verdict.OverLimit, v.Status)
		require.Equal(t, geo.ResetAfter(t1), v.RetryAfter)
	})

	t.Run("FailLocal counts other instances against the limit", func(t *testing.T) {
		t.Parallel()
		tb := mkTable(t, geo, limit, true)
		store := newFakeStore()
		store.add("k", geo.Index(t0), 80)
		r, _ := tb.ref("k")
		tb.syncView().MarkDirty(r)
		syncAll(tb, geo, store, t0)
		tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: 30, Down: true, Mode: policy.FailLocal})
		got, v := admitUntil(t, tb, "k", t0, 1000)
		// Its part of the room the fleet left: ⌊(100−80)·30/100⌋, not
		// the whole share (the other instances get theirs of the same 20).
		require.Equal(t, int64(6), got)
		require.Equal(t, verdict.OverLimit, v.Status)
		require.Equal(t, int64(14), v.Remaining, "Remaining is the window's")
		// Once the acknowledged bucket has left the window, the whole
		// share is back.
		later := t0 + int64(geo.Window()) + geo.Sub()
		got, _ = admitUntil(t, tb, "k", later, 1000)
		require.Equal(t, int64(30), got)
	})

	t.Run("FailOpen admits everything and counts it", func(t *testing.T) {
		t.Parallel()
		tb := mkTable(t, geo, limit, true)
		tb.setLimits(tableport.Limits{Cap: 5, Share: 10, Down: true, Mode: policy.FailOpen})
		for i := 0; i < 3*limit; i++ {
			v := tb.AllowAt("k", t0, 1)
			require.Equal(t, verdict.Allowed, v.Status)
			require.GreaterOrEqual(t, v.Remaining, int64(0))
		}
		require.Equal(t, int64(3*limit), ownCount(tb, "k", t0))
		refs := tb.syncView().Drain(nil)
		require.Len(t, refs, 1)
		require.Equal(t, int64(3*limit), pendingSum(tb, refs[0], t0), "to push later")
		require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, limit).Status)
	})

	t.Run("FailClosed admits nothing", func(t *testing.T) {
		t.Parallel()
		tb := mkTable(t, geo, limit, true)
		tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: 10, Down: true, Mode: policy.FailClosed})
		v := tb.AllowAt("k", t0, 1)
		require.Equal(t, verdict.StoreDown, v.Status)
		require.Zero(t, ownCount(tb, "k", t0))
		require.Empty(t, tb.syncView().Drain(nil))
		tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: 10})
		require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
	})

	t.Run("Local tables ignore the store's health", func(t *testing.T) {
		t.Parallel()
		tb := mkTable(t, geo, limit, false)
		for _, h := range []policy.FailureMode{policy.FailClosed, policy.FailLocal, policy.FailOpen} {
			tb.setLimits(tableport.Limits{Cap: 1, Share: 1, Down: true, Mode: h})
			require.Equal(t, verdict.Allowed, tb.AllowAt(fmt.Sprint(h), t0, 10).Status)
		}
		got, v := admitUntil(t, tb, "x", t0, 1000)
		require.Equal(t, int64(limit), got)
		require.Equal(t, verdict.OverLimit, v.Status)
	})

	t.Run("AllowDegraded ignores the table's health", func(t *testing.T) {
		t.Parallel()
		tb := mkTable(t, geo, limit, true)
		tb.setLimits(tableport.Limits{Cap: 3, Share: 20})
		got, v := admitUntil(t, tb, "k", t0, 1000)
		require.Equal(t, int64(3), got)
		require.Equal(t, verdict.OverCap, v.Status)

		// The store failed the OverCap check: the caller's failure mode
		// decides, on own counts (3 already), never with OverCap.
		for i := 0; i < 17; i++ {
			require.Equal(t, verdict.Allowed, tb.AllowDegraded("k", t0, 1, policy.FailLocal).Status, "i=%d", i)
		}
		v = tb.AllowDegraded("k", t0, 1, policy.FailLocal)
		require.Equal(t, verdict.OverLimit, v.Status)
		require.Equal(t, verdict.StoreDown, tb.AllowDegraded("k", t0, 1, policy.FailClosed).Status)
		for i := 0; i < 2*limit; i++ {
			require.Equal(t, verdict.Allowed, tb.AllowDegraded("k", t0, 1, policy.FailOpen).Status)
		}
		require.Equal(t, int64(20+2*limit), ownCount(tb, "k", t0))
		// The table itself is still Healthy with its cap.
		require.Equal(t, verdict.OverLimit, tb.AllowAt("k", t0, 1).Status)
		require.Equal(t, verdict.OverCap, tb.AllowAt("fresh", t0, 4).Status)

		// And the other way round: a FailClosed table still admits by a
		// degraded check's mode, without touching its cached budgets.
		tb2 := mkTable(t, geo, limit, true)
		tb2.setLimits(tableport.Limits{Cap: 3, Share: 20, Down: true, Mode: policy.FailClosed})
		require.Equal(t, verdict.StoreDown, tb2.AllowAt("k", t0, 1).Status)
		require.Equal(t, verdict.Allowed, tb2.AllowDegraded("k", t0, 1, policy.FailOpen).Status)
		require.Equal(t, verdict.StoreDown, tb2.AllowAt("k", t0, 1).Status)
		require.Equal(t, verdict.StoreDown, tb2.AllowDegraded("other", t0, 1, policy.FailClosed).Status)
		for _, h := range []policy.FailureMode{policy.FailLocal, policy.FailOpen, policy.FailClosed} {
			for i := 0; i < 50; i++ {
				assert.NotEqual(t, verdict.OverCap, tb2.AllowDegraded("k", t0, 1, h).Status)
			}
		}
	})

	t.Run("RetryAfter is -1 for a cost over the limit", func(t *testing.T) {
		t.Parallel()
		tb := mkTable(t, geo, limit, true)
		v := tb.AllowAt("k", t0, limit+1)
		require.Equal(t, verdict.OverLimit, v.Status)
		require.Equal(t, time.Duration(-1), v.RetryAfter)
		require.Equal(t, int64(limit), v.Remaining)
	})
}

// TestAllowDegradedNeverOverCap: AllowDegraded decides by a failure mode,
// never by the cap, whatever the table's own state: the cap binds only while
// the store is up, and a degraded check is one the store failed. (It used to
// take a health that could be "healthy", and then returned OverCap; the
// failure mode is now the one policy.FailureMode enum, which has no such
// value.)
func TestAllowDegradedNeverOverCap(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 1)
	for _, m := range []policy.FailureMode{policy.FailLocal, policy.FailOpen, policy.FailClosed} {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			tb := mkTable(t, geo, 100, true)
			tb.setLimits(tableport.Limits{Cap: 2, Share: 100})
			for i := 0; i < 5; i++ {
				v := tb.AllowDegraded("k", base, 1, m)
				require.NotEqual(t, verdict.OverCap, v.Status, "i=%d", i)
				require.Equal(t, m == policy.FailClosed, v.Status == verdict.StoreDown, "i=%d", i)
			}
		})
	}
}
