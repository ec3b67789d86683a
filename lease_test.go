package sluice_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// TestLeaseCutsRoundTrips: a key hammered far below its limit asks the store
// for a lease at its cap, and for more each time it runs low: a handful of
// asks instead of one per cap's worth of checks. An ask is a
// reservation (a check waited) or an early sync (the lease was asked ahead,
// in the background); which of the two a given ask is depends on how the
// loop is scheduled against the store's replies, so the test bounds their
// sum. After a Flush the store counts exactly what was admitted (the unused
// units are given back), and a Strict rule never takes a lease: every check
// is a reservation.
func TestLeaseCutsRoundTrips(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	for _, tc := range []struct {
		mode      policy.Mode
		maxAsks   int64
		minAsks   int64
		remaining int64
	}{
		// Cap ⌊0.01·1000/2⌋ = 5: without leases 300 checks take 59
		// reservations. With them the instance holds at most
		// ⌊(⌊1000/10⌋ − 1)/2⌋ = 49 units unused and asks again once it
		// has (5 + 49)/2 or less left: a grant serves about 27 checks,
		// and 300 take about 11. Each grant is asked for as a
		// reservation, ahead as an early sync, or both (a tight loop sees
		// 7 + 7): 24 bounds the sum, far below 59.
		{policy.Eventual, 24, 1, 700},
		{policy.Strict, 300, 300, 700},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			rule := policy.Rule{Name: "r", Limit: 1000, Window: time.Minute, Mode: tc.mode}
			l, err := sluice.New(sluice.Options{Redis: client, Prefix: "lease-" + tc.mode.String(), SyncInterval: time.Hour, MinInstances: 1,
				// A Timeout no loaded machine reaches: a reservation that
				// times out is denied, which is not what this test is about.
				Timeout: 5 * time.Second}, rule)
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			ctx := context.Background()
			for i := range 300 {
				d, err := l.Allow(ctx, "r", "k")
				require.NoError(t, err)
				require.True(t, d.Allowed, "check %d", i)
			}
			st := l.Stats().Sync
			asks := st.Reservations + st.EarlySyncs
			assert.LessOrEqual(t, asks, tc.maxAsks, "reservations %d, early syncs %d", st.Reservations, st.EarlySyncs)
			assert.GreaterOrEqual(t, asks, tc.minAsks, "reservations %d, early syncs %d", st.Reservations, st.EarlySyncs)
			require.NoError(t, l.Flush(ctx))
			keys, err := client.Keys(ctx, "lease-"+tc.mode.String()+":{r:k}*").Result()
			require.NoError(t, err)
			require.Len(t, keys, 1)
			var inStore int64
			for f, v := range client.HGetAll(ctx, keys[0]).Val() {
				if f[0] >= '0' && f[0] <= '9' {
					n, err := strconv.ParseInt(v, 10, 64)
					require.NoError(t, err)
					inStore += n
				}
			}
			assert.Equal(t, int64(300), inStore, "the store counts what was admitted, no unused lease")
			d, err := l.Peek("r", "k")
			require.NoError(t, err)
			assert.Equal(t, tc.remaining, d.Remaining)
		})
	}
}

// aheadClock is the system clock plus a step that the test sets: a local
// clock that has run ahead of the store's since the offset was measured.
type aheadClock struct{ step atomic.Int64 }

func (c *aheadClock) Now() time.Time { return time.Now().Add(time.Duration(c.step.Load())) }

// TestLeaseOfALeftBucket: an instance whose clock runs ahead of the store's
// (an offset measured on a lopsided round trip) past a bucket's end is
// granted leases of a bucket its checks have left. It gives them back at
// once: held, they would count as held until the next cycle (an hour here)
// and stop every grant after the store has reached the bucket too, one
// round trip per cap's worth of checks (about 50 asks for 300 checks).
func TestLeaseOfALeftBucket(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	rule := policy.Rule{Name: "r", Limit: 1000, Window: 10 * time.Second, Mode: policy.Eventual}
	clk := &aheadClock{}
	l, err := sluice.New(sluice.Options{Redis: client, Prefix: "left", SyncInterval: time.Hour, MinInstances: 1,
		Timeout: 5 * time.Second, Clock: clk}, rule)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	check := func(n int) int64 {
		before := l.Stats().Sync
		for i := range n {
			d, err := l.Allow(ctx, "r", "k")
			require.NoError(t, err)
			require.True(t, d.Allowed, "check %d", i)
		}
		after := l.Stats().Sync
		return after.Reservations + after.EarlySyncs - before.Reservations - before.EarlySyncs
	}
	// Sub-windows of 1 s on the store clock (Redis TIME, this machine's):
	// 80 ms before one ends, the local clock steps 300 ms ahead.
	const sub = time.Second
	now := time.Now()
	end := now.Truncate(sub).Add(sub)
	if end.Sub(now) < 80*time.Millisecond {
		end = end.Add(sub)
	}
	time.Sleep(time.Until(end.Add(-80 * time.Millisecond)))
	clk.step.Store(int64(300 * time.Millisecond))
	check(300)
	// Once the store has passed the bucket's end too, the leases it grants
	// serve the checks again.
	time.Sleep(time.Until(end.Add(50 * time.Millisecond)))
	asks := check(300)
	assert.LessOrEqual(t, asks, int64(24), "asks for 300 checks once both clocks are in the bucket")
	require.NoError(t, l.Flush(ctx))
}
