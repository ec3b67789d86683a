package localcache

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
				if _, ok := tb.TryAllow(key, n); ok {
					admitted[k].Add(n)
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
