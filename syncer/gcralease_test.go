package syncer

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/window"
)

// TestGCRALeaseMatchesReference: on random arrivals, costs and lease
// requests over a few keys, then a burst of them per key that the store runs
// back to back, an Eventual rule's store (Rules().AddGCRA, whose
// bucket holds window.SplitBucket's store units) decides each cost as
// window.GCRA of that capacity decides it at the store's time, leases what
// the bucket holds after it up to the want, and leaves the key at the
// reference's TAT with both taken, to the nanosecond.
func TestGCRALeaseMatchesReference(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	for i, tc := range []struct {
		window       time.Duration
		limit, burst int64
		budget       float64
	}{
		// Intervals of milliseconds: a few calls drain a bucket, however
		// slow the round trips (the race detector, a loaded machine).
		{10 * time.Second, 1000, 20, 0.01},
		{10 * time.Second, 3333, 40, 0.05}, // T = 3000.3µs
		{100 * time.Second, 10_000, 40, 0},
	} {
		t.Run(fmt.Sprintf("%v/%d/burst%d/eps%v", tc.window, tc.limit, tc.burst, tc.budget), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(client, "g")
			cfg.Prefix = "lease" + strconv.Itoa(i)
			s := startSyncer(t, cfg)
			full := window.NewGCRA(tc.window, tc.limit, tc.burst)
			capacity, pool := window.SplitBucket(full.Burst(), tc.budget)
			require.Positive(t, pool)
			g := window.NewGCRA(tc.window, tc.limit, capacity)
			r, err := s.addGCRA("g", full.Interval(), full.Burst(), capacity)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(9, uint64(i)))
			tats := map[string]int64{}
			var leased, denied int64
			ctx := ctxT(t, opTimeout)
			check := func(step, key string, n, want int64, a syncport.GCRAAnswer) {
				t.Helper()
				at := fmt.Sprintf("step %s key %s n %d want %d at %d", step, key, n, want, a.At)
				next, ok := g.Admit(tats[key], a.At, n)
				require.Equal(t, ok, a.Admitted, at)
				if ok {
					got := min(want, g.Remaining(next, a.At))
					require.Equal(t, got, a.Leased, at)
					tats[key] = next + got*g.Interval()
					leased += got
				} else {
					require.Zero(t, a.Leased, at)
					denied++
				}
				require.Equal(t, max(tats[key], a.At), a.TAT, at)
			}
			for step := 0; step < referenceSteps(); step++ {
				time.Sleep(strictGap(rng, time.Duration(g.Interval())))
				key := "k" + strconv.Itoa(rng.IntN(2))
				n := 1 + rng.Int64N(3)
				want := rng.Int64N(pool + 1)
				a, err := r.lease(ctx, key, n, want)
				require.NoError(t, err)
				check(strconv.Itoa(step), key, n, want, a)
			}
			// The steps above drain the bucket only if their round trips
			// are quicker than its refill, which a loaded machine's are not
			// (an interval is a few ms). A burst of 3·Store calls in one
			// pipeline, which the store runs back to back, asks for at
			// least 3·Store units: it drains the bucket and is denied unless
			// the store stalls for 2·Store intervals (over 200 ms) within
			// the pipeline.
			for _, key := range []string{"k0", "k1"} {
				pipe := client.Pipeline()
				type call struct {
					n, want int64
					cmd     *redis.Cmd
				}
				calls := make([]call, 3*capacity)
				for j := range calls {
					n, want := 1+rng.Int64N(3), rng.Int64N(pool+1)
					calls[j] = call{n, want, gcraScript.Eval(ctx, pipe, []string{r.KeyName(key)}, r.interval, r.tau, n, "0", want)}
				}
				_, err := pipe.Exec(ctx)
				require.NoError(t, err)
				for j, c := range calls {
					v, err := c.cmd.Int64Slice()
					require.NoError(t, err)
					a, err := gcraAnswer(v)
					require.NoError(t, err)
					check("burst "+strconv.Itoa(j), key, c.n, c.want, a)
				}
			}
			t.Logf("leased %d, denied %d", leased, denied)
			require.Positive(t, leased)
			require.Positive(t, denied)
		})
	}
}

// referenceSteps is how many random calls the script-against-reference
// tests make: each sleeps about an interval before its call, so -short
// makes fewer (150, against 400 in the full run).
func referenceSteps() int {
	if testing.Short() {
		return 150
	}
	return 400
}
