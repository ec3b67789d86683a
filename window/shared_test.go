package window_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/window"
)

// TestSplitBucket: the store's bucket and the fleet's leases add up to the
// capacity plus the error budget, and the leases leave the store room for a
// load of 0.9 of the capacity (no false denials).
func TestSplitBucket(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		burst       int64
		budget      float64
		store, pool int64
	}{
		{burst: 1, budget: 0.01, store: 1, pool: 0},
		{burst: 100, budget: 0, store: 95, pool: 5},
		{burst: 100, budget: 0.05, store: 98, pool: 7},
		{burst: 1000, budget: 0.01, store: 955, pool: 55},
		{burst: 10, budget: 2, store: 15, pool: 5},
		{burst: 7, budget: -1, store: 7, pool: 0},
	} {
		t.Run(fmt.Sprint(tc.burst, "/", tc.budget), func(t *testing.T) {
			t.Parallel()
			store, pool := window.SplitBucket(tc.burst, tc.budget)
			require.Equal(t, [2]int64{tc.store, tc.pool}, [2]int64{store, pool})
			e := int64(math.Min(math.Floor(max(tc.budget, 0)*float64(tc.burst)), float64(tc.burst)))
			require.Equal(t, tc.burst+e, store+pool)
			require.LessOrEqual(t, float64(pool), float64(store)-0.9*float64(tc.burst))
		})
	}
}

// TestLease: the leases of instances live instances (and of one more, an
// instance not yet counted) never hold more than the pool.
func TestLease(t *testing.T) {
	t.Parallel()
	for _, pool := range []int64{0, 1, 7, 49, 1000} {
		for _, n := range []int64{0, 1, 2, 4, 8, 100} {
			lease := window.Lease(pool, n)
			require.LessOrEqual(t, lease*(max(n, 1)+1), pool, "pool %d, %d instances", pool, n)
			require.Equal(t, pool/(max(n, 1)+1), lease)
		}
	}
}
