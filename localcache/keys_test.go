package localcache

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/window"
)

// TestKeyBound: once Keys.max keys are tracked, new keys share the table's
// overflow entry, limited as one key, until sweeps free room.
func TestKeyBound(t *testing.T) {
	t.Parallel()
	for _, eventual := range []bool{false, true} {
		t.Run(fmt.Sprintf("eventual=%v", eventual), func(t *testing.T) {
			t.Parallel()
			geo := window.NewFixed(time.Minute)
			const bound, limit = 100, 5
			keys := NewKeys(bound)
			require.Equal(t, int64(bound), keys.Max())
			tb, err := New(Config{Geometry: geo, Limit: limit, Eventual: eventual, Keys: keys})
			require.NoError(t, err)
			tb.SetLimits(Limits{Cap: NoCap, Share: limit})
			t0 := bucketStart(geo, 0)
			for i := 0; i < bound; i++ {
				v := tb.AllowAt(fmt.Sprint("key-", i), t0, 1)
				require.Equal(t, Allowed, v.Status)
				require.True(t, tracked(tb, fmt.Sprint("key-", i)))
			}
			require.Equal(t, int64(bound), keys.Len())
			require.False(t, keys.Full())
			if eventual {
				syncAll(tb, geo, newFakeStore(), t0)
			}

			// Keys 100.. share one counter of limit 5.
			for i := bound; i < bound+12; i++ {
				v := tb.AllowAt(fmt.Sprint("key-", i), t0, 1)
				require.False(t, tracked(tb, fmt.Sprint("key-", i)), "key-%d is on the overflow entry", i)
				if i < bound+limit {
					require.Equal(t, Allowed, v.Status, "key-%d", i)
					require.Equal(t, int64(bound+limit-1-i), v.Remaining)
				} else {
					require.Equal(t, OverLimit, v.Status, "key-%d", i)
					require.Positive(t, v.RetryAfter)
				}
			}
			require.True(t, keys.Full(), "a refused key asks for a sweep")
			require.False(t, keys.Full(), "Full clears")
			require.Equal(t, bound, tb.Len())
			require.Equal(t, int64(bound), keys.Len())

			r, ok := tb.Ref("key-200")
			require.False(t, ok)
			tb.MarkDirty(r) // no-op on the overflow entry
			require.Empty(t, tb.Drain(nil), "the overflow entry is local to the process")
			_, _, ok = tb.Estimate("key-200", t0)
			require.False(t, ok)

			// Tracked keys are unaffected.
			v := tb.AllowAt("key-0", t0, 1)
			require.Equal(t, Allowed, v.Status)
			require.True(t, tracked(tb, "key-0"))
			if eventual {
				syncAll(tb, geo, newFakeStore(), t0)
			}

			// Once the keys are idle, two sweeps free them.
			t1 := t0 + geo.Sub()
			require.Zero(t, tb.Sweep(t1))
			require.Equal(t, bound, tb.Sweep(t1))
			require.Zero(t, tb.Len())
			require.Zero(t, keys.Len())
			v = tb.AllowAt("key-150", t1, 1)
			require.Equal(t, Allowed, v.Status)
			require.True(t, tracked(tb, "key-150"), "tracked again")
			require.Equal(t, int64(limit-1), v.Remaining, "with a counter of its own")
			_, ok = tb.Ref("key-150")
			require.True(t, ok)
		})
	}
}

// TestKeyBoundOverflowNeverOverCap: the overflow entry is decided locally,
// whatever the cap.
func TestKeyBoundOverflowNeverOverCap(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 2)
	tb, err := New(Config{Geometry: geo, Limit: 50, Eventual: true, Keys: NewKeys(1)})
	require.NoError(t, err)
	tb.SetLimits(Limits{Cap: 1, Share: 50})
	require.Equal(t, Allowed, tb.AllowAt("tracked", base, 1).Status)
	require.Equal(t, OverCap, tb.AllowAt("tracked", base, 1).Status)
	for i := 0; i < 50; i++ {
		v := tb.AllowAt(fmt.Sprint("flood-", i), base, 1)
		require.False(t, tracked(tb, fmt.Sprint("flood-", i)))
		require.Equal(t, Allowed, v.Status)
	}
	v := tb.AllowAt("flood-x", base, 1)
	require.Equal(t, OverLimit, v.Status)
	require.False(t, tracked(tb, "flood-x"))
	require.Equal(t, []string{"tracked"}, drainKeys(tb))
}

// TestKeyBoundShared: the bound covers all the tables that share a Keys.
func TestKeyBoundShared(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 3)
	keys := NewKeys(100)
	a, err := New(Config{Geometry: geo, Limit: 10, Keys: keys})
	require.NoError(t, err)
	b, err := New(Config{Geometry: geo, Limit: 10, Keys: keys, Eventual: true})
	require.NoError(t, err)
	for i := 0; i < 60; i++ {
		a.AllowAt(fmt.Sprint(i), base, 1)
		require.True(t, tracked(a, fmt.Sprint(i)))
	}
	for i := 0; i < 60; i++ {
		b.AllowAt(fmt.Sprint(i), base, 1)
		require.Equal(t, i < 40, tracked(b, fmt.Sprint(i)), "key %d", i)
	}
	require.Equal(t, int64(100), keys.Len())
	require.Equal(t, 60, a.Len())
	require.Equal(t, 40, b.Len())
}

// TestKeyBoundConcurrent floods a table with distinct keys from many
// goroutines, with and without a sweeper: the number of tracked keys never
// passes the bound by more than the goroutines racing past its check, and
// Keys.Len always matches the map once they stop.
func TestKeyBoundConcurrent(t *testing.T) {
	t.Parallel()
	for _, sweeping := range []bool{false, true} {
		t.Run(fmt.Sprintf("sweeping=%v", sweeping), func(t *testing.T) {
			t.Parallel()
			geo := window.NewFixed(time.Second)
			const bound = 200
			keys := NewKeys(bound)
			tb, err := New(Config{Geometry: geo, Limit: 1000, Keys: keys})
			require.NoError(t, err)
			var clock atomic.Int64
			clock.Store(bucketStart(geo, 0))
			var stop atomic.Bool
			var peak atomic.Int64
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // monitor, and sweeper
				defer wg.Done()
				for !stop.Load() {
					peak.Store(max(peak.Load(), int64(tb.Len()), keys.Len()))
					if sweeping {
						tb.Sweep(clock.Load())
						if keys.Full() {
							clock.Add(geo.Sub()) // everything so far is idle
						}
					}
				}
			}()
			var overflowed, ontable atomic.Int64
			hammer(func(gi int) {
				for i := 0; i < 1500; i++ {
					key := fmt.Sprintf("g%d-%d", gi, i)
					tb.AllowAt(key, clock.Load(), 1)
					if !tracked(tb, key) {
						overflowed.Add(1)
					} else {
						ontable.Add(1)
					}
				}
			})
			stop.Store(true)
			wg.Wait()
			require.LessOrEqual(t, int64(tb.Len()), int64(bound+hammerers))
			require.LessOrEqual(t, peak.Load(), int64(bound+hammerers))
			require.Equal(t, int64(tb.Len()), keys.Len())
			require.Positive(t, overflowed.Load())
			if sweeping {
				require.Greater(t, ontable.Load(), int64(bound), "sweeps made room for new keys")
			} else {
				require.LessOrEqual(t, ontable.Load(), int64(bound+hammerers))
			}
			t.Logf("tracked %d, overflowed %d, peak %d", ontable.Load(), overflowed.Load(), peak.Load())
		})
	}
}
