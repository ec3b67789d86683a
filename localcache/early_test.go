package localcache

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// earlyTable returns an Eventual table of limit 100 whose keys' allowance is
// bound by cap (the window has more room), and a counter of its wake calls.
// Key "k" is busy: the fleet admitted 20 in the bucket before t0.
func earlyTable(t *testing.T, capv int64) (*Table, window.Sliding, int64, *atomic.Int64) {
	t.Helper()
	geo := window.NewSliding(time.Minute, 6)
	tb := mkTable(t, geo, 100, true)
	tb.setLimits(tableport.Limits{Cap: capv, Share: 100, Mode: policy.FailLocal})
	woken := new(atomic.Int64)
	tb.syncView().OnEarly(func() { woken.Add(1) })
	t0 := bucketStart(geo, 0)
	tb.tick(t0)
	r, ok := tb.ref("k")
	require.True(t, ok)
	k := geo.Index(t0)
	tb.syncView().Settle(r, t0, nil, k-1, []int64{20, 0}, Bucket{})
	return tb, geo, t0, woken
}

// TestEarlyAsk: an admission that leaves a cap-bound key half of its
// allowance or less asks for an early sync, once, on the fast path and the
// slow one alike; the key asks again only after a sync of it settled.
func TestEarlyAsk(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		capv     int64
		askAfter int // admissions before the one that asks
		ticked   bool
	}{
		{"cap 2 asks at its first unit", 2, 0, false},
		{"cap 8 asks at its fourth", 8, 3, false},
		{"cap 8 on the published time", 8, 3, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb, _, t0, woken := earlyTable(t, tc.capv)
			allow := func() verdict.Verdict {
				if tc.ticked {
					return tb.Allow("k", 1)
				}
				return tb.AllowAt("k", t0, 1)
			}
			for i := 0; i < tc.askAfter; i++ {
				require.Equal(t, verdict.Allowed, allow().Status)
			}
			require.Zero(t, woken.Load(), "more than half left: no ask")
			require.Equal(t, verdict.Allowed, allow().Status)
			assert.Equal(t, int64(1), woken.Load())
			for allow().Status == verdict.Allowed {
			}
			assert.Equal(t, int64(1), woken.Load(), "asks once")

			refs := tb.syncView().Early(nil)
			require.Len(t, refs, 1)
			assert.Equal(t, "k", tb.syncView().Key(refs[0]))
			assert.Empty(t, tb.syncView().Early(nil), "taken off the list")
			assert.Equal(t, verdict.OverCap, allow().Status)
			assert.Equal(t, int64(1), woken.Load(), "no new ask while its sync is under way")

			// The sync acknowledges everything: the cap is whole again, and
			// the key asks again at half of it.
			pend := tb.syncView().Pending(refs[0], t0, nil)
			var sum int64
			for _, b := range pend {
				sum += b.Count
			}
			require.Equal(t, tc.capv, sum)
			tb.syncView().Settle(refs[0], t0, pend, pend[0].Index-1, []int64{20, sum}, Bucket{})
			for i := 0; i < tc.askAfter; i++ {
				require.Equal(t, verdict.Allowed, allow().Status)
			}
			require.Equal(t, int64(1), woken.Load())
			require.Equal(t, verdict.Allowed, allow().Status)
			assert.Equal(t, int64(2), woken.Load())
			assert.Len(t, tb.syncView().Early(nil), 1)
		})
	}
}

// TestEarlyNotAsked: no early sync where a sync cannot widen what the
// instance may admit locally: a key bound by the window's room, a Local
// table, a table on its failure mode.
func TestEarlyNotAsked(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(tb *Table)
	}{
		{"bound by the room (cap above the limit)", func(tb *Table) {
			tb.setLimits(tableport.Limits{Cap: 1000, Share: 100, Mode: policy.FailLocal})
		}},
		{"store down, fail-local", func(tb *Table) {
			tb.setLimits(tableport.Limits{Cap: 4, Share: 100, Mode: policy.FailLocal, Down: true})
		}},
		{"recovering", func(tb *Table) {
			tb.setLimits(tableport.Limits{Cap: 4, Share: 100, Mode: policy.FailLocal, Recovering: true})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb, _, t0, woken := earlyTable(t, 4)
			tc.setup(tb)
			for tb.AllowAt("k", t0, 1).Status == verdict.Allowed {
			}
			assert.Zero(t, woken.Load())
			assert.Empty(t, tb.syncView().Early(nil))
		})
	}
	t.Run("local table", func(t *testing.T) {
		t.Parallel()
		geo := window.NewSliding(time.Minute, 6)
		tb := mkTable(t, geo, 10, false)
		var woken atomic.Int64
		tb.syncView().OnEarly(func() { woken.Add(1) })
		t0 := bucketStart(geo, 0)
		for tb.AllowAt("k", t0, 1).Status == verdict.Allowed {
		}
		assert.Zero(t, woken.Load())
	})
}

// TestEarlyBusy: only a busy key asks: one whose instance's part of the
// bucket before (the fleet's total times Share/Limit) is at least half of
// what it has left, or that holds a lease of the current bucket.
func TestEarlyBusy(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		prev, share int64 // the fleet's total in the bucket before; Share
		lease       int64 // units leased in the current bucket
		asks        bool
	}{
		{"no history", 0, 100, 0, false},
		{"a quiet key", 1, 25, 0, false},
		{"its part is half of what it has left", 8, 25, 0, true},
		{"a lease of this bucket", 0, 100, 3, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			geo := window.NewSliding(time.Minute, 6)
			tb := mkTable(t, geo, 100, true)
			tb.setLimits(tableport.Limits{Cap: 8, Share: tc.share, Mode: policy.FailLocal})
			var woken atomic.Int64
			tb.syncView().OnEarly(func() { woken.Add(1) })
			t0 := bucketStart(geo, 0)
			tb.tick(t0)
			r, ok := tb.ref("q")
			require.True(t, ok)
			k := geo.Index(t0)
			tb.syncView().Settle(r, t0, nil, k-1, []int64{tc.prev, tc.lease}, Bucket{Index: k, Count: tc.lease})
			for i := int64(0); i < tc.lease+4; i++ { // half of the cap past the lease
				require.Equal(t, verdict.Allowed, tb.AllowAt("q", t0, 1).Status)
			}
			// 4 of the cap left: busy if the part (prev·share/100) ≥ 2.
			assert.Equal(t, tc.asks, woken.Load() == 1)
		})
	}
}

// TestEarlyNewKeys: a key never synced asks for an early sync at the
// admission that leaves it half of its cap, newAsks such keys a sub-window
// per table; past them, a new key asks only once it has used its cap, as a
// key with no history did before; the next sub-window brings newAsks more.
func TestEarlyNewKeys(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 6)
	tb := mkTable(t, geo, 100, true)
	tb.setLimits(tableport.Limits{Cap: 2, Share: 25, Mode: policy.FailLocal})
	var woken atomic.Int64
	tb.syncView().OnEarly(func() { woken.Add(1) })
	t0 := bucketStart(geo, 0)
	tb.tick(t0)
	asked := func(key string, now int64) bool {
		before := woken.Load()
		require.Equal(t, verdict.Allowed, tb.AllowAt(key, now, 1).Status, key)
		return woken.Load() > before
	}
	for i := range newAsks {
		assert.True(t, asked(fmt.Sprintf("new%d", i), t0), "new key %d asks at its first unit", i)
	}
	assert.False(t, asked("late", t0), "past the budget: no ask at the first unit")
	assert.True(t, asked("late", t0), "its cap used up: asks")

	// A key synced since, with no history, does not ask at its first unit.
	r, ok := tb.ref("old")
	require.True(t, ok)
	tb.syncView().Settle(r, t0, nil, geo.Index(t0)-1, []int64{0, 0}, Bucket{})
	t1 := t0 + geo.Sub()
	tb.tick(t1)
	assert.False(t, asked("old", t1), "a key synced, with no history: no ask at its first unit")
	assert.True(t, asked("next", t1), "a sub-window later, a new key asks again")
	require.Len(t, tb.syncView().Early(nil), newAsks+2, "the asks, each key once")
}

// TestEarlyConcurrent: keys asked for by many goroutines at once are each on
// the list once, and the list holds them all.
func TestEarlyConcurrent(t *testing.T) {
	t.Parallel()
	tb, geo, t0, woken := earlyTable(t, 2)
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, key := range keys { // busy, as "k" is
		r, ok := tb.ref(key)
		require.True(t, ok)
		tb.syncView().Settle(r, t0, nil, geo.Index(t0)-1, []int64{20, 0}, Bucket{})
	}
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for _, k := range keys {
				tb.AllowAt(k, t0, 1)
			}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
	refs := tb.syncView().Early(nil)
	got := make([]string, 0, len(refs))
	for _, r := range refs {
		got = append(got, tb.syncView().Key(r))
	}
	assert.ElementsMatch(t, keys, got)
	assert.Equal(t, int64(len(keys)), woken.Load())
}

// TestCatchUp: a table whose ticker fell behind is brought up to date by its
// checks within catchUpEvery units of a key, on the fast path and the slow
// one; a fresh published time is left alone.
func TestCatchUp(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Second, 10)
	var clock atomic.Int64
	tb, err := New(Config{Geometry: geo, Limit: 1_000_000, Eventual: false, Keys: NewKeys(1 << 10), Now: clock.Load})
	require.NoError(t, err)
	t0 := bucketStart(geo, 0)
	clock.Store(t0)
	tb.tick(t0)

	clock.Store(t0 + int64(staleAfter)) // not stale yet
	require.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status)
	assert.Equal(t, t0, tb.Now(), "within staleAfter: left alone")

	late := t0 + 3*geo.Sub() // the ticker held back three sub-windows
	clock.Store(late)
	for i := 1; i < catchUpEvery-1; i++ { // the key's 2nd to 15th units, on the fast path
		require.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status)
	}
	assert.Equal(t, t0, tb.Now(), "the fast path reads the clock only every catchUpEvery units")
	require.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status) // the 16th
	assert.Equal(t, late, tb.Now(), "caught up")
	assert.Equal(t, geo.Index(late)&tagMask, int64(tb.pos.Load())&tagMask, "the bucket published too")

	later := late + 3*geo.Sub()
	clock.Store(later)
	for i := 1; i < catchUpEvery; i++ { // a new key, then its 15 next units
		require.Equal(t, verdict.Allowed, tb.Allow("new", 1).Status)
		require.Equal(t, late, tb.Now())
	}
	// On the slow path too (the budget goes stale with a new limit).
	tb.setLimit(999_999)
	require.Equal(t, verdict.Allowed, tb.Allow("new", 1).Status)
	assert.Equal(t, later, tb.Now(), "the slow path, at the key's 16th unit")
}

// TestLateCachedDenial: once a catch-up has found the ticker late, a cached
// denial catches the published time up first, so that it ends at its retry
// time however far behind the ticker is; on a table whose ticker keeps time
// it is read against the published time alone.
func TestLateCachedDenial(t *testing.T) {
	t.Parallel()
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("late=%v", late), func(t *testing.T) {
			t.Parallel()
			geo := window.NewSliding(time.Second, 10)
			var clock atomic.Int64
			tb, err := New(Config{Geometry: geo, Limit: 10, Keys: NewKeys(1 << 10), Now: clock.Load})
			require.NoError(t, err)
			t0 := bucketStart(geo, 0) + 3*geo.Sub()/10
			clock.Store(t0)
			tb.tick(t0)
			if late {
				clock.Store(t0 + 2*int64(staleAfter))
				tb.catchUp() // as a check that finds the ticker late does
				require.Equal(t, clock.Load(), tb.Now())
				t0 = tb.Now()
			}
			for range 10 {
				require.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status)
			}
			v := tb.Allow("k", 1)
			require.Equal(t, verdict.OverLimit, v.Status)
			require.Positive(t, cachedDenialOf(tb, "k"))
			clock.Store(t0 + int64(v.RetryAfter) + int64(time.Millisecond)) // the ticker does not run
			if late {
				assert.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status, "past the retry time by the clock")
				assert.Equal(t, clock.Load(), tb.Now(), "caught up")
			} else {
				assert.Equal(t, verdict.OverLimit, tb.Allow("k", 1).Status, "read against the published time")
				assert.Equal(t, t0, tb.Now())
			}
		})
	}
}

// TestTickNeverBack: the published time never goes back, whoever publishes
// it (the ticker, a check catching up): a Tick with an older time than the
// published one keeps the newer, and still republishes the generation.
func TestTickNeverBack(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Second, 10)
	tb := mkTable(t, geo, 100, true)
	t1 := bucketStart(geo, 1)
	tb.tick(t1)
	tb.tick(t1 - geo.Sub()) // a ticker that read the clock a bucket earlier
	assert.Equal(t, t1, tb.Now())
	assert.Equal(t, geo.Index(t1)&tagMask, int64(tb.pos.Load())&tagMask, "the bucket stays the newer one")
	gen := tb.gen.Load()
	tb.setLimit(99) // bumps the generation and republishes at the published time
	assert.NotEqual(t, gen, tb.gen.Load())
	assert.Equal(t, (geo.Index(t1)+int64(tb.gen.Load()))&tagMask, int64(tb.pos.Load()>>24)&tagMask, "the new generation's tag")
}
