package localcache

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// fullTable returns a table whose key bound is full of other keys, so that
// every new key stays untracked.
func fullTable(t *testing.T, geo window.Sliding, limit int64, eventual bool) *Table {
	t.Helper()
	const bound = 4
	tb := mustTable(t, Config{Geometry: geo, Limit: limit, Eventual: eventual, Keys: NewKeys(bound)})
	tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: limit})
	for i := 0; tb.keys.tracked() < bound; i++ {
		require.Less(t, i, 1000, "the bound does not fill")
		tb.AllowAt(fmt.Sprint("junk-", i%bound), base, 1)
	}
	tb.syncView().Drain(nil) // the junk keys are synced
	return tb
}

// TestUntrackedNotShared is issue 19's regression: with the cache full,
// each untracked key is limited on its own — a key that was never checked
// is not denied because other untracked keys used up a shared counter, and
// no untracked key gets more than its limit.
func TestUntrackedNotShared(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 10)
	const limit = 10
	for _, tc := range []struct {
		name     string
		eventual bool
		limits   tableport.Limits
		want     int64 // admitted per key
	}{
		{"local", false, tableport.Limits{Cap: tableport.NoCap, Share: limit}, limit},
		{"eventual/fail-local", true, tableport.Limits{Cap: tableport.NoCap, Share: 3, Down: true, Mode: policy.FailLocal}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb := fullTable(t, geo, limit, tc.eventual)
			tb.setLimits(tc.limits)
			now := base
			for k := range 5 {
				key := fmt.Sprint("stranger-", k)
				got, v := admitUntil(t, tb, key, now, 3*limit)
				assert.Equal(t, tc.want, got, "%s: its own limit, not a shared one", key)
				assert.Equal(t, verdict.OverLimit, v.Status)
				assert.Positive(t, v.RetryAfter)
				assert.False(t, tracked(tb, key))
			}
			if tc.eventual {
				assert.Empty(t, tb.syncView().Drain(nil), "untracked keys are never synced")
			}
		})
	}
}

// TestUntrackedByHealth: an Eventual table hands an untracked key to the
// store while it is up, and decides it by the failure mode while it is down
// (Allow) or after the store failed it (AllowDegraded), without a shared
// bucket.
func TestUntrackedByHealth(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 10)
	const limit, share = 10, 4
	for _, tc := range []struct {
		name   string
		down   bool
		mode   policy.FailureMode
		status verdict.Status // first check
		passes int64          // of 2·limit checks
	}{
		{"healthy", false, policy.FailLocal, verdict.Untracked, 0},
		{"fail-local", true, policy.FailLocal, verdict.Allowed, share},
		{"fail-open", true, policy.FailOpen, verdict.Allowed, 2 * limit},
		{"fail-closed", true, policy.FailClosed, verdict.StoreDown, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb := fullTable(t, geo, limit, true)
			tb.setLimits(tableport.Limits{Cap: tableport.NoCap, Share: share, Down: tc.down, Mode: tc.mode})
			now := base + geo.Sub()
			var passed int64
			for i := range 2 * limit {
				v := tb.AllowAt("k", now, 1)
				if i == 0 {
					require.Equal(t, tc.status, v.Status)
				}
				if v.Status == verdict.Allowed {
					passed++
				}
			}
			assert.Equal(t, tc.passes, passed)
			assert.False(t, tracked(tb, "k"))

			// After the store failed a check (the store is believed up):
			// the caller's failure mode decides, per key.
			if tc.down {
				return
			}
			for _, m := range []struct {
				mode   policy.FailureMode
				status verdict.Status
				passes int64
			}{
				{policy.FailLocal, verdict.Allowed, share},
				{policy.FailOpen, verdict.Allowed, 2 * limit},
				{policy.FailClosed, verdict.StoreDown, 0},
			} {
				key := "degraded-" + m.mode.String()
				passed := int64(0)
				for i := range 2 * limit {
					v := tb.AllowDegraded(key, now, 1, m.mode)
					if i == 0 {
						require.Equal(t, m.status, v.Status, "%v", m.mode)
					}
					if v.Status == verdict.Allowed {
						passed++
					}
				}
				assert.Equal(t, m.passes, passed, "%v", m.mode)
				assert.False(t, tracked(tb, key), "AllowDegraded counts no sighting at the bound")
			}
		})
	}
}

// TestUntrackedSeedsEntry: a key decided on the sketch that then enters the
// cache keeps its count in the window (a Local table, or an Eventual one
// while the store is down, whose entry pushes it later); while the store is
// up an Eventual entry starts empty.
func TestUntrackedSeedsEntry(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 10)
	const limit = 10
	for _, tc := range []struct {
		name     string
		eventual bool
		limits   tableport.Limits
		carried  int64
	}{
		{"local", false, tableport.Limits{Cap: tableport.NoCap, Share: limit}, 3},
		{"eventual/down", true, tableport.Limits{Cap: tableport.NoCap, Share: limit, Down: true, Mode: policy.FailLocal}, 3},
		{"eventual/healthy", true, tableport.Limits{Cap: tableport.NoCap, Share: limit}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			keys := NewKeys(8)
			tb := mustTable(t, Config{Geometry: geo, Limit: limit, Eventual: tc.eventual, Keys: keys})
			tb.setLimits(tc.limits)
			for i := 0; keys.tracked() < 7; i++ {
				require.Less(t, i, 1000, "the bound does not fill")
				tb.AllowAt(fmt.Sprint("junk-", i%7), base, 1)
			}
			// 7 of 8 tracked: a new key needs 15 sightings. Three
			// decided on the sketch (or by the store).
			for range 3 {
				v := tb.AllowAt("k", base, 1)
				if v.Status == verdict.Untracked {
					continue // the store decides: nothing local
				}
				require.Equal(t, verdict.Allowed, v.Status)
			}
			require.False(t, tracked(tb, "k"))
			wantRoom := int64(limit) - tc.carried
			if tc.eventual {
				wantRoom = limit // the store's count is the key's
			}
			assert.Equal(t, wantRoom, tb.room("k", base), "Room of an untracked key")
			// Now the cache has room again: the key enters at once.
			keys.n.Add(-4)
			v := tb.AllowAt("k", base, 1)
			require.Equal(t, verdict.Allowed, v.Status)
			require.True(t, tracked(tb, "k"))
			assert.Equal(t, int64(limit)-tc.carried-1, v.Remaining)
			_, own, _ := tb.estimate("k", base)
			assert.Equal(t, tc.carried+1, own)
			if tc.eventual {
				r, _ := tb.ref("k")
				assert.Equal(t, tc.carried+1, pendingSum(tb, r, base), "pushed when the store is back")
			}
		})
	}
}
