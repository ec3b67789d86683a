package localcache

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// leaseFleet is a fleet of LeaseTables of one Eventual bucket rule and the
// store they share, played in virtual time: the store is window.GCRA of the
// SplitBucket's store capacity, deciding as the store's script does.
type leaseFleet struct {
	g              window.GCRA
	capacity, pool int64 // window.SplitBucket's: the store's bucket, the fleet's leases
	tables         []*LeaseTable
	store          map[string]int64 // the store's TAT per key
	// What the fleet admitted, per key: (time, cost).
	admitted map[string][][2]int64
	denied   int
	refills  int
}

// lease is the most units an instance that counts instances live ones
// holds: ⌊pool/(instances+1)⌋ (window.SplitBucket).
func (f *leaseFleet) lease(instances int) int64 { return f.pool / int64(instances+1) }

func newLeaseFleet(t *testing.T, win time.Duration, limit, burst int64, budget float64, instances int) *leaseFleet {
	t.Helper()
	full := window.NewGCRA(win, limit, burst)
	f := &leaseFleet{store: map[string]int64{}, admitted: map[string][][2]int64{}}
	f.capacity, f.pool = window.SplitBucket(full.Burst(), budget)
	f.g = window.NewGCRA(win, limit, f.capacity)
	for range instances {
		tb, err := NewLeaseTable(f.g, NewKeys(100))
		require.NoError(t, err)
		tb.Leases().SetLease(f.lease(instances))
		f.tables = append(f.tables, tb)
	}
	return f
}

// check decides cost n for key on instance i at now, asking the store as
// the engine does, and returns whether it was admitted.
func (f *leaseFleet) check(t *testing.T, i int, key string, now, n int64) bool {
	tb := f.tables[i]
	if o, step := tb.Allow(key, now, n); step != verdict.Ask {
		require.True(t, o.Allowed)
		f.admitted[key] = append(f.admitted[key], [2]int64{now, n})
		if step == verdict.TakenLow {
			f.refill(tb, key, now)
		}
		return true
	}
	if o, denied := tb.Leases().Denied(key, now, n); denied {
		_, ok := f.g.Admit(f.store[key], now, n)
		require.False(t, ok, "a local denial the store would admit: %s at %d", key, now)
		require.Positive(t, o.RetryAfter)
		f.denied++
		return false
	}
	tk := tb.Leases().Ask(key)
	next, ok := f.g.Admit(f.store[key], now, n)
	var leased int64
	if ok {
		leased = min(tk.Want, f.g.Remaining(next, now))
		f.store[key] = next + leased*f.g.Interval()
		f.admitted[key] = append(f.admitted[key], [2]int64{now, n})
	} else {
		f.denied++
	}
	tb.Leases().Settle(tk, now, max(f.store[key], now), leased)
	return ok
}

// refill asks the store for more units in the background, as the engine
// does when the lease runs low: a cost of 0 and the lease.
func (f *leaseFleet) refill(tb *LeaseTable, key string, now int64) {
	tk := tb.Leases().Ask(key)
	next, _ := f.g.Admit(f.store[key], now, 0)
	leased := min(tk.Want, f.g.Remaining(next, now))
	f.store[key] = next + leased*f.g.Interval()
	f.refills++
	tb.Leases().Settle(tk, now, max(f.store[key], now), leased)
}

// held returns what the fleet holds for key.
func (f *leaseFleet) held(key string) (h int64) {
	for _, tb := range f.tables {
		h += tb.held(key)
	}
	return h
}

// excess returns the most admitted in any interval of the key less the
// refill over it.
func (f *leaseFleet) excess(key string) int64 {
	var best, low, count int64
	first := true
	for _, a := range f.admitted[key] {
		// x = admitted before this one − refill up to it (scaled by T).
		x := count*f.g.Interval() - a[0]
		if first || x < low {
			low, first = x, false
		}
		count += a[1]
		best = max(best, count*f.g.Interval()-a[0]-low)
	}
	return (best + f.g.Interval() - 1) / f.g.Interval()
}

// TestLeaseTableFleetBound: on random arrivals and costs over a few keys
// and instances, in virtual time, a fleet of LeaseTables admits, in every
// interval, at most Burst + ⌊ε·Burst⌋ more than the refill
// (window.SplitBucket's bound), holds at most Pool units per key, denies
// locally only what the store would deny, and reaches the store's rate
// under saturation.
func TestLeaseTableFleetBound(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		win          time.Duration
		limit, burst int64
		budget       float64
		instances    int
	}{
		{time.Second, 1000, 0, 0.01, 4},
		{time.Second, 100, 40, 0.05, 3},
		{time.Minute, 600, 600, 0, 8},
		{time.Second, 10, 0, 0.01, 2}, // no pool: every check is the store's
	} {
		t.Run(fmt.Sprintf("%v/%d/%d/eps%v/n%d", tc.win, tc.limit, tc.burst, tc.budget, tc.instances), func(t *testing.T) {
			t.Parallel()
			f := newLeaseFleet(t, tc.win, tc.limit, tc.burst, tc.budget, tc.instances)
			rng := rand.New(rand.NewPCG(41, uint64(i)))
			now := base
			iv := f.g.Interval()
			for step := 0; step < 20000; step++ {
				now += gap(rng, iv/int64(tc.instances))
				key := fmt.Sprint("k", rng.IntN(3))
				f.check(t, rng.IntN(tc.instances), key, now, 1+rng.Int64N(min(3, f.capacity)))
				require.LessOrEqual(t, f.held(key), f.pool, "step %d", step)
			}
			burst := window.NewGCRA(tc.win, tc.limit, tc.burst).Burst()
			bound := burst + int64(tc.budget*float64(burst)) // the promise, whatever the split
			for key := range f.admitted {
				require.LessOrEqual(t, f.excess(key), bound, key)
			}
			require.Positive(t, f.denied)
			if f.lease(tc.instances) > 1 {
				require.Positive(t, f.refills, "a lease running low is refilled")
			}
		})
	}
}

// TestLeaseTableNoFalseDenials: in virtual time, a key offered a stream that
// a bucket of 0.9 of the rate and 0.9 of Burst admits whole, spread over the
// instances at random, is never denied.
func TestLeaseTableNoFalseDenials(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		limit, burst int64
		budget       float64
		instances    int
	}{{1000, 0, 0.01, 4}, {100, 50, 0, 3}, {200, 200, 0.05, 8}} {
		t.Run(fmt.Sprintf("%d/%d/eps%v/n%d", tc.limit, tc.burst, tc.budget, tc.instances), func(t *testing.T) {
			t.Parallel()
			f := newLeaseFleet(t, time.Second, tc.limit, tc.burst, tc.budget, tc.instances)
			full := window.NewGCRA(time.Second, tc.limit, tc.burst)
			shaper := window.NewGCRA(time.Second, tc.limit*9/10, full.Burst()*9/10)
			rng := rand.New(rand.NewPCG(43, uint64(i)))
			now, tat, offered := base, int64(0), 0
			for step := 0; step < 5000; step++ {
				now += rng.Int64N(40 * full.Interval())
				for range 1 + rng.IntN(int(full.Burst())) {
					next, ok := shaper.Admit(tat, now, 1)
					if !ok {
						break
					}
					tat = next
					offered++
					require.True(t, f.check(t, rng.IntN(tc.instances), "k", now, 1), "step %d", step)
				}
			}
			require.Greater(t, offered, 5000)
		})
	}
}

// TestLeaseTableConcurrent: checks racing on held units never admit more
// than were leased, and one check at a time asks for a lease.
func TestLeaseTableConcurrent(t *testing.T) {
	t.Parallel()
	g := window.NewGCRA(time.Hour, 1000, 0)
	tb, err := NewLeaseTable(g, NewKeys(10))
	require.NoError(t, err)
	tb.Leases().SetLease(100)
	o, step := tb.Allow("k", base, 1)
	require.Equal(t, verdict.Ask, step, "a fresh key asks the store: %+v", o)
	tk := tb.Leases().Ask("k")
	require.Equal(t, int64(100), tk.Want)
	require.Zero(t, tb.Leases().Ask("k").Want, "one check asks for a lease at a time")
	require.Equal(t, int64(100), tb.Leases().Settle(tk, base, base+101*g.Interval(), 100))
	require.Zero(t, tb.Leases().Ask("k").Want, "the whole lease is held")
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if o, step := tb.Allow("k", base, 1); step != verdict.Ask && o.Allowed {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 100, admitted)
	require.Zero(t, tb.held("k"))
	tk = tb.Leases().Ask("k")
	require.Equal(t, int64(100), tk.Want, "the next check asks again")
	tb.Leases().Settle(tk, verdict.NoAnswer, verdict.NoAnswer, 0)
	tk = tb.Leases().Ask("k")
	require.Equal(t, int64(100), tk.Want, "a failed ask gives its claim up")
	tb.Refund("k", 3)
	require.Equal(t, int64(3), tb.held("k"), "a refund is held again")
	tb.Refund("k", 1000)
	require.Equal(t, int64(100), tb.held("k"), "never more than the lease")
	require.Zero(t, tb.Sweep(base+200*g.Interval()), "a key being asked about stays")
	tb.Leases().Settle(tk, verdict.NoAnswer, verdict.NoAnswer, 0)
	require.Equal(t, 1, tb.Sweep(base+200*g.Interval()), "the store's bucket is full again")
	require.Zero(t, tb.held("k"))
}
