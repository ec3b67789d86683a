package localcache

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// drainKeys drains tb and returns the sorted keys it returned.
func drainKeys(tb *Table) []string {
	var keys []string
	for _, r := range tb.syncView().Drain(nil) {
		keys = append(keys, tb.syncView().Key(r))
	}
	slices.Sort(keys)
	return keys
}

func TestDrain(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 6)
	now := bucketStart(geo, 0)

	t.Run("each admitted-to key once per Drain", func(t *testing.T) {
		t.Parallel()
		tb := mkTable(t, geo, 100, true)
		// New keys are born parked: queue and drain them once, so that
		// they are clean, as keys are after a cycle synced them.
		for _, k := range []string{"a", "b", "c"} {
			r, _ := tb.ref(k)
			tb.syncView().MarkDirty(r)
		}
		require.Equal(t, []string{"a", "b", "c"}, drainKeys(tb))
		for i := 0; i < 5; i++ {
			for _, k := range []string{"a", "b", "c"} {
				require.Equal(t, verdict.Allowed, tb.AllowAt(k, now, 1).Status)
			}
		}
		require.Equal(t, []string{"a", "b", "c"}, drainKeys(tb))
		require.Empty(t, drainKeys(tb), "drained keys are clean")

		require.Equal(t, verdict.Allowed, tb.AllowAt("b", now, 1).Status)
		require.Equal(t, verdict.Allowed, tb.AllowAt("b", now+1, 1).Status)
		require.Equal(t, verdict.Allowed, tb.AllowAt("d", now, 1).Status)
		require.Equal(t, []string{"b"}, drainKeys(tb), "a new key is born parked: its admission does not queue it")

		// Drain appends to dst.
		require.Equal(t, verdict.Allowed, tb.AllowAt("a", now, 1).Status)
		dst := []verdict.Ref{nil}
		dst = tb.syncView().Drain(dst)
		require.Len(t, dst, 2)
		require.Nil(t, dst[0])
		require.Equal(t, "a", tb.syncView().Key(dst[1]))
	})

	t.Run("denials do not dirty", func(t *testing.T) {
		t.Parallel()
		tb := mkTable(t, geo, 10, true)
		tb.setLimits(tableport.Limits{Cap: 2, Share: 10})
		require.Equal(t, verdict.OverLimit, tb.AllowAt("big", now, 11).Status)
		require.Equal(t, verdict.OverCap, tb.AllowAt("capped", now, 3).Status)
		require.Empty(t, drainKeys(tb))
		tb.setLimits(tableport.Limits{Cap: 2, Share: 10, Down: true, Mode: policy.FailClosed})
		require.Equal(t, verdict.StoreDown, tb.AllowAt("down", now, 1).Status)
		require.Equal(t, []string{"big", "capped"}, drainKeys(tb),
			"leaving the healthy state queues every parked key (a new key is born parked), not a key the store down denied")
		_, ok := tb.ref("untouched")
		require.True(t, ok)
		require.Empty(t, drainKeys(tb), "Ref alone does not dirty")
	})

	t.Run("MarkDirty requeues once", func(t *testing.T) {
		t.Parallel()
		tb := mkTable(t, geo, 100, true)
		require.Equal(t, verdict.Allowed, tb.AllowAt("a", now, 1).Status)
		a, _ := tb.ref("a")
		tb.syncView().MarkDirty(a) // born parked: MarkDirty queues it
		refs := tb.syncView().Drain(nil)
		require.Len(t, refs, 1)
		tb.syncView().MarkDirty(refs[0])
		tb.syncView().MarkDirty(refs[0]) // already dirty: not queued twice
		require.Equal(t, verdict.Allowed, tb.AllowAt("a", now, 1).Status)
		require.Equal(t, []string{"a"}, drainKeys(tb))

		r, ok := tb.ref("never-admitted")
		require.True(t, ok)
		tb.syncView().MarkDirty(r)
		require.Equal(t, []string{"never-admitted"}, drainKeys(tb))
	})

	t.Run("Local tables never queue", func(t *testing.T) {
		t.Parallel()
		tb := mkTable(t, geo, 100, false)
		require.Equal(t, verdict.Allowed, tb.AllowAt("a", now, 1).Status)
		r, _ := tb.ref("a")
		tb.syncView().MarkDirty(r)
		require.Empty(t, tb.syncView().Drain(nil))
		require.Equal(t, int64(1), pendingSum(tb, r, now), "Pending still reports a Local table's counts")
	})

	t.Run("Pending and Settle", func(t *testing.T) {
		t.Parallel()
		tb := mkTable(t, geo, 100, true)
		k := geo.Index(now)
		for i := int64(0); i < 3; i++ {
			require.Equal(t, verdict.Allowed, tb.AllowAt("a", now+i*geo.Sub(), i+1).Status)
		}
		r, _ := tb.ref("a")
		later := now + 2*geo.Sub()
		require.ElementsMatch(t, []Bucket{{Index: k, Count: 1}, {Index: k + 1, Count: 2}, {Index: k + 2, Count: 3}}, tb.syncView().Pending(r, later, nil))
		// Buckets that left the window are not pending.
		require.ElementsMatch(t, []Bucket{{Index: k + 2, Count: 3}}, tb.syncView().Pending(r, later+int64(geo.Span()-1)*geo.Sub(), nil))
		require.Empty(t, tb.syncView().Pending(r, later+int64(geo.Span())*geo.Sub(), nil))

		// A partial ack lowers pend by what it acks.
		tb.syncView().Settle(r, later, []Bucket{{Index: k, Count: 1}, {Index: k + 2, Count: 2}}, k, []int64{1, 0, 2}, Bucket{})
		require.ElementsMatch(t, []Bucket{{Index: k + 1, Count: 2}, {Index: k + 2, Count: 1}}, tb.syncView().Pending(r, later, nil))
		est, own, _ := tb.estimate("a", later)
		require.Equal(t, 6.0, est)
		require.Equal(t, int64(3), own)

		// An ack for a bucket whose slot has been reused is dropped.
		far := now + int64(geo.Span()+1)*geo.Sub()
		require.Equal(t, verdict.Allowed, tb.AllowAt("a", far, 5).Status)
		kf := geo.Index(far)
		tb.syncView().Settle(r, far, []Bucket{{Index: kf - int64(geo.Span()), Count: 5}}, kf, []int64{0}, Bucket{})
		require.Contains(t, tb.syncView().Pending(r, far, nil), Bucket{Index: kf, Count: 5})
	})
}

// TestDrainConcurrent runs a simulated syncer (Drain, Pending, push, Settle)
// against goroutines admitting to many keys: no admission is lost. While they
// run, what is acked plus what is pending always equals what was admitted once
// both sides stop; and a final sync leaves nothing pending, so every key that
// was admitted to was drained after its last admission.
func TestDrainConcurrent(t *testing.T) {
	t.Parallel()
	for _, capv := range []int64{tableport.NoCap, 7} {
		t.Run(fmt.Sprintf("cap=%d", capv), func(t *testing.T) {
			t.Parallel()
			geo := window.NewSliding(time.Minute, 4)
			const keys = 40
			tb := mkTable(t, geo, 1<<30, true)
			tb.setLimits(tableport.Limits{Cap: capv, Share: 1 << 30})
			store := newFakeStore()
			now := bucketStart(geo, 0) + 17
			var admitted [keys]atomic.Int64
			var acked atomic.Int64
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					refs := tb.syncView().Drain(nil)
					for _, r := range refs {
						acked.Add(syncRef(tb, geo, store, r, now))
					}
				}
			}()
			hammer(func(gi int) {
				rng := rand.New(rand.NewPCG(uint64(gi), 3))
				for i := 0; i < 3000; i++ {
					k := rng.IntN(keys)
					n := 1 + rng.Int64N(3)
					switch v := tb.AllowAt(fmt.Sprint("key-", k), now, n); v.Status {
					case verdict.Allowed:
						admitted[k].Add(n)
					case verdict.OverCap:
					default:
						t.Errorf("unexpected %v", v.Status)
					}
				}
			})
			stop.Store(true)
			wg.Wait()

			var total, pending int64
			for k := range admitted {
				total += admitted[k].Load()
				r, ok := tb.ref(fmt.Sprint("key-", k))
				require.True(t, ok)
				p := pendingSum(tb, r, now)
				require.LessOrEqual(t, p, capv)
				pending += p
			}
			require.Equal(t, total, acked.Load()+pending, "admitted = acked + pending")

			acked.Add(syncAll(tb, geo, store, now))
			require.Equal(t, total, acked.Load(), "the last drain returned every key with pending counts")
			for k := range admitted {
				key := fmt.Sprint("key-", k)
				est, own, _ := tb.estimate(key, now)
				require.Zero(t, own, key)
				require.Equal(t, float64(admitted[k].Load()), est, key)
			}
			t.Logf("admitted %d units over %d keys", total, keys)
		})
	}
}
