package localcache

import (
	"fmt"
	"sync"
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

// TestSweepTwoPasses: a key is evicted only once nothing of it is left in the
// window, by the second sweep that finds it idle.
func TestSweepTwoPasses(t *testing.T) {
	t.Parallel()
	for _, g := range referenceGeometries {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			keys := NewKeys(10)
			tb, err := New(Config{Geometry: g.geo, Limit: 10, Keys: keys})
			require.NoError(t, err)
			sub := g.geo.Sub()
			t0 := bucketStart(g.geo, 0) + sub/2
			require.Equal(t, verdict.Allowed, tb.AllowAt("a", t0, 3).Status)
			require.Equal(t, 1, tb.size())
			require.Equal(t, int64(1), keys.tracked())

			// Bucket k is in the window until bucket k+span starts.
			gone := (g.geo.Index(t0) + int64(g.geo.Span())) * sub
			for _, at := range []int64{t0, t0 + sub, gone - sub/2, gone - 1} {
				if at >= gone {
					continue
				}
				for i := 0; i < 3; i++ {
					require.Zero(t, tb.Sweep(at), "at +%v", time.Duration(at-t0))
				}
				require.Equal(t, 1, tb.size())
				est, _, ok := tb.estimate("a", at)
				require.True(t, ok)
				require.Positive(t, est)
			}
			require.Zero(t, tb.Sweep(gone), "the first idle sweep only marks")
			require.Equal(t, 1, tb.size())
			require.Equal(t, 1, tb.Sweep(gone))
			require.Zero(t, tb.size())
			require.Zero(t, keys.tracked())
			_, _, ok := tb.estimate("a", gone)
			require.False(t, ok)
			require.Zero(t, tb.Sweep(gone))

			// A key that is checked between the two passes survives.
			require.Equal(t, verdict.Allowed, tb.AllowAt("b", gone, 1).Status)
			later := gone + int64(g.geo.Span())*sub
			require.Zero(t, tb.Sweep(later))
			v := tb.AllowAt("b", later, 2) // revives it
			require.Equal(t, verdict.Allowed, v.Status)
			require.Zero(t, tb.Sweep(later))
			require.Zero(t, tb.Sweep(later))
			require.Equal(t, 1, tb.size())
			_, own, _ := tb.estimate("b", later)
			require.Equal(t, int64(2), own)

			// Denials do not keep an idle key alive, nor revive it.
			far := later + int64(g.geo.Span())*sub
			require.Zero(t, tb.Sweep(far))
			require.Equal(t, verdict.OverLimit, tb.AllowAt("b", far, 11).Status)
			require.Equal(t, 1, tb.Sweep(far))
		})
	}
}

func TestSweepEventual(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 2)
	sub := geo.Sub()
	t0 := bucketStart(geo, 0)
	gone := t0 + int64(geo.Span())*sub
	store := newFakeStore()
	tb := mkTable(t, geo, 100, true)

	require.Equal(t, verdict.Allowed, tb.AllowAt("dirty", t0, 1).Status)
	queued, _ := tb.ref("dirty") // born parked: queue it, as an admission near its cap would
	tb.syncView().MarkDirty(queued)
	for i := 0; i < 3; i++ {
		require.Zero(t, tb.Sweep(gone), "a dirty key waits for the syncer")
	}
	require.Equal(t, int64(1), syncAll(tb, geo, store, t0))
	// Acknowledged: only glob holds it now, which still counts.
	require.Zero(t, tb.Sweep(gone-1))
	require.Zero(t, tb.Sweep(gone-1))
	require.Equal(t, 1, tb.size())
	require.Zero(t, tb.Sweep(gone))

	// A dead key that is checked is revived and queued for the syncer.
	require.Equal(t, verdict.Allowed, tb.AllowAt("dirty", gone, 1).Status)
	refs := tb.syncView().Drain(nil)
	require.Len(t, refs, 1)
	require.Equal(t, "dirty", tb.syncView().Key(refs[0]))
	require.Zero(t, tb.Sweep(gone))
	require.Equal(t, int64(1), syncRef(tb, geo, store, refs[0], gone))

	// So is one that MarkDirty requeues.
	far := gone + int64(geo.Span())*sub
	require.Zero(t, tb.Sweep(far))
	r, _ := tb.ref("dirty")
	tb.syncView().MarkDirty(r)
	require.Zero(t, tb.Sweep(far))
	require.Equal(t, []string{"dirty"}, drainKeys(tb))
	require.Zero(t, tb.Sweep(far))
	require.Equal(t, 1, tb.Sweep(far))
	require.Zero(t, tb.size())
}

// TestSweepRace checks keys while another goroutine sweeps in a loop, at a
// time just past the keys' last window, so that the sweeper marks and removes
// entries the checkers are using: every admission is counted exactly once, and
// each key admits exactly its limit.
func TestSweepRace(t *testing.T) {
	t.Parallel()
	for _, g := range []struct {
		name string
		geo  window.Sliding
	}{referenceGeometries[0], referenceGeometries[2], referenceGeometries[4]} {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			const keys, limit = 16, 24
			kb := NewKeys(1000)
			tb, err := New(Config{Geometry: g.geo, Limit: limit, Keys: kb})
			require.NoError(t, err)
			var clock atomic.Int64
			now := bucketStart(g.geo, 0)
			clock.Store(now)
			var stop atomic.Bool
			var swept atomic.Int64
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					swept.Add(int64(tb.Sweep(clock.Load())))
				}
			}()
			names := make([]string, keys)
			for k := range names {
				names[k] = fmt.Sprint("key-", k)
			}
			for phase := 0; phase < 25; phase++ {
				// Just past the window of everything counted so far.
				now += int64(g.geo.Span()) * g.geo.Sub()
				clock.Store(now)
				if phase%2 == 1 {
					// Mark every key dead first, so that the checkers'
					// revivals race the sweeper's removals.
					swept.Add(int64(tb.Sweep(now)))
				}
				var admitted [keys]atomic.Int64
				hammer(func(gi int) {
					for i := 0; i < 2*limit/hammerers+2; i++ {
						for k := range names {
							k := (k + gi) % keys
							if tb.AllowAt(names[k], now, 1).Status == verdict.Allowed {
								admitted[k].Add(1)
							}
						}
					}
				})
				for k, name := range names {
					est, own, ok := tb.estimate(name, now)
					require.True(t, ok, "phase %d %s", phase, name)
					require.Equal(t, int64(limit), admitted[k].Load(), "phase %d %s", phase, name)
					require.Equal(t, float64(limit), est, "phase %d %s", phase, name)
					require.Equal(t, int64(limit), own, "phase %d %s", phase, name)
				}
				require.Equal(t, keys, tb.size())
			}
			stop.Store(true)
			wg.Wait()
			require.Equal(t, int64(tb.size()), kb.tracked(), "the key count matches the map")
			t.Logf("%d entries swept", swept.Load())
		})
	}
}

// TestSweepGoneEntry reproduces, step by step, a check that loads an entry
// the sweeper has just marked gone but not yet removed from the map: the
// check undoes its addition on the gone entry and lands on a fresh one, and
// the sweeper's removal then leaves the fresh entry alone.
func TestSweepGoneEntry(t *testing.T) {
	t.Parallel()
	geo := window.NewFixed(time.Minute)
	keys := NewKeys(10)
	tb := mustTable(t, Config{Geometry: geo, Limit: 10, Keys: keys})
	t0 := bucketStart(geo, 0)
	require.Equal(t, verdict.Allowed, tb.AllowAt("a", t0, 4).Status)
	old := tb.m.Load("a")
	require.NotNil(t, old)

	t1 := t0 + geo.Sub()
	require.Zero(t, tb.Sweep(t1))
	require.Equal(t, stDead, old.state.Load())
	// The sweeper's second pass, up to the removal.
	require.True(t, old.state.CompareAndSwap(stDead, stGone))
	keys.n.Add(-1)

	v := tb.AllowAt("a", t1, 3)
	require.Equal(t, verdict.Allowed, v.Status)
	require.Equal(t, int64(7), v.Remaining)
	fresh := tb.m.Load("a")
	require.NotNil(t, fresh)
	require.NotSame(t, old, fresh)
	require.Zero(t, countAt(tb.pend(old, tb.slotOf(geo.Index(t1))).Load(), geo.Index(t1)), "the addition on the gone entry was undone")
	_, own, _ := tb.estimate("a", t1)
	require.Equal(t, int64(3), own)
	require.Equal(t, int64(1), keys.tracked())

	// The sweeper's removal (as in Sweep) only removes the entry it marked.
	tb.m.Delete("a", old)
	require.Equal(t, 1, tb.size())
	_, own, _ = tb.estimate("a", t1)
	require.Equal(t, int64(3), own)

	// A check that holds the gone entry after its removal installs a fresh
	// one itself.
	fresh.state.Store(stGone)
	keys.n.Add(-1)
	tb.m.Delete("a", fresh)
	require.Equal(t, 0, tb.size())
	tb.replace(fresh, "a")
	require.Equal(t, 1, tb.size())
	require.Equal(t, int64(1), keys.tracked())
	again := tb.m.Load("a")
	require.NotSame(t, fresh, again)
	tb.replace(fresh, "a") // another checker that found the same gone entry
	same := tb.m.Load("a")
	require.Same(t, again, same)
	require.Equal(t, int64(1), keys.tracked())
}

// TestSweepKeepsLeasedKey: a key that holds a lease is not idle, whatever
// its counts: the store counts the leased units until the syncer ends the
// lease and gives back what was not used (Release), which it can do only
// while the entry is there. The case: a fixed window's key leased the next
// window ahead of its end, which holds no count of the new window until its
// first pull there. It is swept once the syncer has ended the lease.
func TestSweepKeepsLeasedKey(t *testing.T) {
	t.Parallel()
	geo := window.NewFixed(time.Second)
	tb := mkTable(t, geo, 100, true)
	tb.setLimits(tableport.Limits{Cap: 2, Share: 100, Mode: policy.FailLocal})
	s := newFakeStore()
	t0 := bucketStart(geo, 0)
	k0 := geo.Index(t0)
	tb.tick(t0)
	require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
	r, ok := tb.ref("k")
	require.True(t, ok)
	require.Len(t, tb.syncView().Drain(nil), 1)
	// A sync that pushes the admission and is granted 6 units of the next
	// window.
	pend := tb.syncView().Pending(r, t0, nil)
	s.add("k", k0+1, 6)
	tb.syncView().Settle(r, t0, pend, k0, s.push("k", pend, k0, geo.Span()), Bucket{Index: k0 + 1, Count: 6})

	t1 := bucketStart(geo, 1)
	tb.tick(t1)
	for range 3 {
		assert.Zero(t, tb.Sweep(t1), "a leased key stays")
	}
	unused, done := tb.syncView().Release(r, k0+1, t1, true)
	require.True(t, done)
	assert.Equal(t, int64(6), unused, "the lease is given back whole")
	removed := 0
	for range 3 {
		removed += tb.Sweep(t1)
	}
	assert.Equal(t, 1, removed, "then the idle key goes")
}
