package localcache

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

const hammerers = 8

// hammer runs f(g) on hammerers goroutines and waits for them.
func hammer(f func(g int)) {
	var wg sync.WaitGroup
	for g := 0; g < hammerers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(g)
		}()
	}
	wg.Wait()
}

// TestConcurrentHotKeyFixedTime has many goroutines offer more than the limit
// on one key at one time: exactly Limit units pass, whatever the costs.
func TestConcurrentHotKeyFixedTime(t *testing.T) {
	t.Parallel()
	for _, g := range referenceGeometries {
		for _, limit := range []int64{1, 100, 1000} {
			for _, mixed := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/L=%d/mixed=%v", g.name, limit, mixed), func(t *testing.T) {
					t.Parallel()
					tb := mkTable(t, g.geo, limit, false)
					now := bucketStart(g.geo, 0) + g.geo.Sub()/3
					var admitted atomic.Int64
					perG := 2*limit/hammerers + 2
					hammer(func(gi int) {
						rng := rand.New(rand.NewPCG(uint64(gi), 7))
						for i := int64(0); i < perG; i++ {
							n := int64(1)
							if mixed {
								n = 1 + rng.Int64N(min(limit, 5))
							}
							if v := tb.AllowAt("hot", now, n); v.Status == verdict.Allowed {
								admitted.Add(n)
							} else {
								assert.Equal(t, verdict.OverLimit, v.Status)
							}
						}
					})
					require.LessOrEqual(t, admitted.Load(), limit)
					// Mixed costs can leave room smaller than the costs
					// that were denied; unit costs then fill it exactly.
					for tb.AllowAt("hot", now, 1).Status == verdict.Allowed {
						admitted.Add(1)
					}
					require.Equal(t, limit, admitted.Load())
					require.Equal(t, limit, ownCount(tb, "hot", now))
				})
			}
		}
	}
}

// TestConcurrentManyKeysFixedTime spreads goroutines over many keys: each key
// admits exactly Limit.
func TestConcurrentManyKeysFixedTime(t *testing.T) {
	t.Parallel()
	for _, g := range []struct {
		name string
		geo  window.Sliding
	}{referenceGeometries[1], referenceGeometries[4]} {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			const keys, limit = 64, 50
			tb := mkTable(t, g.geo, limit, false)
			now := bucketStart(g.geo, 0)
			var admitted [keys]atomic.Int64
			hammer(func(gi int) {
				rng := rand.New(rand.NewPCG(uint64(gi), 11))
				for i := 0; i < keys*limit/2; i++ {
					k := rng.IntN(keys)
					if tb.AllowAt(fmt.Sprintf("key-%d", k), now, 1).Status == verdict.Allowed {
						admitted[k].Add(1)
					}
				}
				// Make sure every key is offered more than its limit.
				for k := 0; k < keys; k++ {
					for j := 0; j < limit/hammerers+2; j++ {
						if tb.AllowAt(fmt.Sprintf("key-%d", k), now, 1).Status == verdict.Allowed {
							admitted[k].Add(1)
						}
					}
				}
			})
			for k := range admitted {
				key := fmt.Sprintf("key-%d", k)
				require.Equal(t, int64(limit), admitted[k].Load(), key)
				require.Equal(t, int64(limit), ownCount(tb, key, now), key)
			}
			require.Equal(t, keys, tb.size())
		})
	}
}

// TestConcurrentTickAllow is the production path: Tick publishes the time,
// Allow reads it.
func TestConcurrentTickAllow(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 6)
	const limit = 500
	tb := mkTable(t, geo, limit, false)
	now := bucketStart(geo, 0) + 5
	tb.tick(now)
	require.Equal(t, now, tb.Now())
	var admitted atomic.Int64
	hammer(func(int) {
		for i := 0; i < limit/hammerers*2; i++ {
			if v := tb.Allow("hot", 1); v.Status == verdict.Allowed {
				admitted.Add(1)
			}
		}
	})
	require.Equal(t, int64(limit), admitted.Load())
	v := tb.Allow("hot", 1)
	require.Equal(t, verdict.OverLimit, v.Status)
	require.Zero(t, v.Remaining)
}

// TestConcurrentPhases advances time in steps (crossing bucket boundaries at
// exactly representable phases) with all goroutines checking at the same time
// within a step: each step admits exactly what reference.Counter says fits.
func TestConcurrentPhases(t *testing.T) {
	t.Parallel()
	for _, g := range referenceGeometries {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			const limit = 120
			tb := mkTable(t, g.geo, limit, false)
			ref := reference.NewCounter(g.geo, limit)
			now := bucketStart(g.geo, 0)
			step := g.geo.Sub() * 3 / 8 // φ stays a multiple of 1/8: E is exact
			steps := 3 * g.geo.Span() * 8 / 3
			for s := 0; s < steps; s++ {
				now += step
				var want int64
				for ref.Allow(now, 1) {
					want++
				}
				var got atomic.Int64
				hammer(func(int) {
					for i := 0; i < limit/hammerers+2; i++ {
						if tb.AllowAt("hot", now, 1).Status == verdict.Allowed {
							got.Add(1)
						}
					}
				})
				require.Equal(t, want, got.Load(), "step %d", s)
				est, _, _ := tb.estimate("hot", now)
				require.Equal(t, ref.Estimate(now), est, "step %d", s)
			}
		})
	}
}

// TestConcurrentFreeRunningClock has one goroutine advance a shared clock
// while others check at whatever time they read (less than a bucket behind
// the newest): per-bucket counts never pass the limit, and a window's buckets
// pass it by no more than the checks that can straddle a boundary (one per
// goroutine per boundary).
func TestConcurrentFreeRunningClock(t *testing.T) {
	t.Parallel()
	for _, g := range []struct {
		name string
		geo  window.Sliding
	}{referenceGeometries[0], referenceGeometries[1], referenceGeometries[4]} {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			const limit = 40
			const keys = 4
			tb := mkTable(t, g.geo, limit, false)
			start := bucketStart(g.geo, 0)
			windows := int64(4)
			if testing.Short() {
				// The clock spins the scheduler at every step: -short runs
				// two windows, which still cross every bucket boundary of
				// the geometry twice; the full run four.
				windows = 2
			}
			end := start + windows*int64(g.geo.Window())
			var clock atomic.Int64
			clock.Store(start)
			var done atomic.Bool
			var checks atomic.Int64
			// The time of each goroutine's check in flight (0: none). A
			// check whose time is more than a window behind another's is
			// outside the contract (it may land on a reused slot), so the
			// clock waits for stragglers: no check lags a bucket or more.
			var inflight [hammerers]atomic.Int64
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer done.Store(true)
				rng := rand.New(rand.NewPCG(1, 2))
				for now, target := start, int64(0); now < end; {
					next := now + rng.Int64N(g.geo.Sub()/16)
					for gi := range inflight {
						for at := inflight[gi].Load(); at != 0 && at <= next-g.geo.Sub(); at = inflight[gi].Load() {
							runtime.Gosched()
						}
					}
					now = next
					clock.Store(now)
					// Let the checkers make progress at this time, however
					// busy the machine is.
					for target += 4 * hammerers; checks.Load() < target; {
						runtime.Gosched()
					}
				}
			}()
			admissions := make([][keys][]int64, hammerers) // per goroutine, per key: bucket of each admitted unit
			hammer(func(gi int) {
				key := make([]string, keys)
				for k := range key {
					key[k] = fmt.Sprintf("k%d", k)
				}
				for i := 0; !done.Load(); i++ {
					checks.Add(1)
					now := clock.Load()
					inflight[gi].Store(now)
					k := i % keys
					v := tb.AllowAt(key[k], now, 1)
					inflight[gi].Store(0)
					if v.Status == verdict.Allowed {
						admissions[gi][k] = append(admissions[gi][k], g.geo.Index(now))
					}
				}
			})
			wg.Wait()
			b := int64(g.geo.Buckets())
			for k := 0; k < keys; k++ {
				per := map[int64]int64{}
				var lo, hi int64 = 1 << 62, 0
				for gi := range admissions {
					for _, j := range admissions[gi][k] {
						per[j]++
						lo, hi = min(lo, j), max(hi, j)
					}
				}
				require.NotEmpty(t, per)
				maxWin := int64(0)
				for j := lo; j <= hi; j++ {
					require.LessOrEqual(t, per[j], int64(limit), "bucket %d", j)
					var win int64
					for i := j - b + 1; i <= j; i++ {
						win += per[i]
					}
					maxWin = max(maxWin, win)
					require.LessOrEqual(t, win, int64(limit)+hammerers*(b-1), "window ending at bucket %d", j)
					if g.geo.Span() == 1 {
						require.LessOrEqual(t, win, int64(limit))
					}
				}
				t.Logf("key %d: largest sum over B consecutive buckets %d (limit %d)", k, maxWin, limit)
			}
		})
	}
}
