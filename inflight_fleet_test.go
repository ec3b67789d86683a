package sluice_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// inflightFleet starts n limiters on srv, each with its own client, closed
// at cleanup.
func inflightFleet(t *testing.T, n int, srv *redistest.Server, opts sluice.Options, rules ...policy.Rule) []*sluice.Limiter {
	t.Helper()
	ls := make([]*sluice.Limiter, n)
	for i := range ls {
		o := opts
		o.Redis = srv.Client(t)
		l, err := sluice.New(o, rules...)
		require.NoError(t, err)
		ls[i] = l
		t.Cleanup(func() { _ = l.Close() })
	}
	return ls
}

// inflightKeys returns the store's in-flight keys under prefix.
func inflightKeys(t *testing.T, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	keys, err := c.Keys(context.Background(), prefix+":inflight:*").Result()
	require.NoError(t, err)
	return keys
}

// noLeasesLeft asserts that the store's in-flight keys under prefix are
// all gone, soon: a release that met a renewal in flight (which may add its
// lease back) is removed again right after that renewal.
func noLeasesLeft(t *testing.T, c redis.UniversalClient, prefix string) {
	t.Helper()
	assert.Eventually(t, func() bool { return len(inflightKeys(t, c, prefix)) == 0 },
		10*time.Second, 10*time.Millisecond, "in-flight keys left under %q", prefix)
}

// fill acquires key on ls in turn until every instance is denied, and
// returns the slots.
func fill(t *testing.T, ls []*sluice.Limiter, key string) []sluice.Slot {
	t.Helper()
	var held []sluice.Slot
	for _, l := range ls {
		for {
			s, d, err := l.Acquire(context.Background(), "uploads", key)
			require.NoError(t, err)
			if !d.Allowed {
				break
			}
			held = append(held, s)
		}
	}
	return held
}

// Eight instances share a limit of 20 slots: the slots the test holds
// across the fleet at any moment never exceed 20, also while 10 of them are
// held for one and a half leases (renewed, they do not lapse), and none is
// left held.
func TestInFlightFleetBound(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ls := inflightFleet(t, 8, srv, sluice.Options{Prefix: "bound", Timeout: time.Second}, uploads(20, policy.ModeDefault))

	held := fill(t, ls, "k")
	require.Len(t, held, 20, "the fleet admits exactly the limit")
	for _, s := range held {
		s.Release()
	}

	var in, most, admitted, denied atomic.Int64
	count := func() {
		n := in.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
	}
	// 10 long holders, two on each of five instances.
	var long []sluice.Slot
	for _, l := range ls[:5] {
		for range 2 {
			s, d, err := l.Acquire(context.Background(), "uploads", "k")
			require.NoError(t, err)
			require.True(t, d.Allowed)
			count()
			long = append(long, s)
		}
	}
	stop := time.Now().Add(sluice.InFlightTTL(ls[0]) * 3 / 2)
	var wg sync.WaitGroup
	for _, l := range ls {
		for range 8 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					s, d, err := l.Acquire(context.Background(), "uploads", "k")
					if !assert.NoError(t, err) || !d.Allowed {
						denied.Add(1)
						time.Sleep(time.Millisecond)
						continue
					}
					// Counted inside the slot's lease: between the
					// admission and the release.
					count()
					admitted.Add(1)
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
					in.Add(-1)
					s.Release()
				}
			})
		}
	}
	wg.Wait()
	t.Logf("admitted %d, denied %d, most held at once %d", admitted.Load(), denied.Load(), most.Load())
	assert.LessOrEqual(t, most.Load(), int64(20))
	assert.Positive(t, admitted.Load())
	for _, s := range long {
		assert.True(t, s.Held())
		in.Add(-1)
		s.Release()
	}
	for _, l := range ls {
		require.NoError(t, sluice.RenewInFlight(l))
		assert.Zero(t, sluice.InFlightLeases(l))
		assert.Zero(t, sluice.InFlightHeld(l, "uploads", "k"))
	}
	noLeasesLeft(t, srv.Client(t), "bound")
}

// An instance that stops without releasing its 5 slots (a crash: its
// renewals stop) holds them until their lease lapses, then the fleet gets
// them back.
func TestInFlightFleetCrash(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// A lease of 3s, renewed every second: the 5 slots are held at least
	// 2s after the crash (-short: a lease of 1.2 s, held at least 0.8 s).
	interval := time.Second
	if testing.Short() {
		interval = 400 * time.Millisecond
	}
	ls := inflightFleet(t, 4, srv, sluice.Options{Prefix: "crash", SyncInterval: interval, Timeout: time.Second}, uploads(20, policy.ModeDefault))
	require.Equal(t, 3*interval, sluice.InFlightTTL(ls[0]))
	crashed, live := ls[0], ls[1:]
	var lost []sluice.Slot
	for range 5 {
		s, d, err := crashed.Acquire(context.Background(), "uploads", "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
		lost = append(lost, s)
	}
	require.NoError(t, crashed.Close()) // Close renews no more and releases nothing

	held := fill(t, live, "k")
	require.Len(t, held, 15, "the crashed instance's slots are held until their lease lapses")
	var more []sluice.Slot
	require.Eventually(t, func() bool {
		more = append(more, fill(t, live, "k")...)
		return len(more) == 5
	}, 10*sluice.InFlightTTL(ls[0]), 50*time.Millisecond, "the slots came back within the lease")
	assert.Empty(t, fill(t, live, "k"), "never more than the limit")
	for _, s := range lost {
		s.Release() // after Close, of a lapsed lease: harmless
	}
	assert.Empty(t, fill(t, live, "k"), "a lapsed lease's release frees nothing")
	for _, s := range append(held, more...) {
		s.Release()
	}
	noLeasesLeft(t, srv.Client(t), "crash")
}

// 10k acquire/release cycles across the fleet, with contexts cancelled
// before and during the acquire and holders that panic (the release in a
// defer), leave no slot held and no key in the store.
func TestInFlightFleetChurn(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t)
	ls := inflightFleet(t, 8, srv, sluice.Options{Prefix: "churn", Timeout: time.Second}, uploads(20, policy.ModeDefault))
	before, err := c.DBSize(context.Background()).Result() // the registry's keys
	require.NoError(t, err)
	cycles := 10_000
	if testing.Short() {
		cycles = 2_000
	}
	var next, admitted, cancelled, panicked atomic.Int64
	var wg sync.WaitGroup
	for _, l := range ls {
		for range 4 {
			wg.Go(func() {
				for next.Add(1) <= int64(cycles) {
					switch rand.IntN(4) {
					case 0: // cancelled before
						ctx, cancel := context.WithCancel(context.Background())
						cancel()
						s, _, err := l.Acquire(ctx, "uploads", "k")
						assert.ErrorIs(t, err, context.Canceled)
						assert.False(t, s.Held())
					case 1: // cancelled while the store decides, or not
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(200))*time.Microsecond)
						s, d, err := l.Acquire(ctx, "uploads", "k")
						cancel()
						if err != nil {
							cancelled.Add(1)
							assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
						}
						if d.Allowed {
							admitted.Add(1)
							s.Release()
						}
					default: // a holder that may panic
						func() {
							defer func() {
								if recover() != nil {
									panicked.Add(1)
								}
							}()
							s, d, err := l.Acquire(context.Background(), "uploads", "k")
							if !assert.NoError(t, err) || !d.Allowed {
								return
							}
							defer s.Release()
							admitted.Add(1)
							if rand.IntN(2) == 0 {
								panic("holder fails")
							}
						}()
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("admitted %d, cancelled in flight %d, panicked %d", admitted.Load(), cancelled.Load(), panicked.Load())
	assert.Positive(t, admitted.Load())
	assert.Positive(t, panicked.Load())
	for _, l := range ls {
		require.NoError(t, sluice.RenewInFlight(l)) // removes the leases of acquires cancelled in flight
		assert.Zero(t, sluice.InFlightLeases(l))
		assert.Zero(t, sluice.InFlightHeld(l, "uploads", "k"))
	}
	noLeasesLeft(t, c, "churn")
	after, err := c.DBSize(context.Background()).Result()
	require.NoError(t, err)
	assert.Equal(t, before, after, "the store holds the keys it held before the cycles")
	held := fill(t, ls, "k")
	assert.Len(t, held, 20, "no slot leaked")
	for _, s := range held {
		s.Release()
	}
}

// While the store is down an Acquire is decided by the failure mode:
// FailLocal admits this instance's share ⌊Limit/N̂⌋, FailClosed denies with
// an error, FailOpen admits. Once the store is back the next renewal adds
// the slots admitted meanwhile, which the fleet then counts.
func TestInFlightStoreDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t)
	opts := sluice.Options{Prefix: "down", Timeout: 200 * time.Millisecond, MinInstances: 2}
	local := inflightFleet(t, 1, srv, opts, uploads(10, policy.ModeDefault))[0]
	opts.FailureMode = policy.FailClosed
	closed := inflightFleet(t, 1, srv, opts, uploads(10, policy.ModeDefault))[0]
	opts.FailureMode = policy.FailOpen
	open := inflightFleet(t, 1, srv, opts, uploads(10, policy.ModeDefault))[0]

	srv.Kill()
	require.Eventually(t, func() bool {
		return local.Stats().Degraded && closed.Stats().Degraded && open.Stats().Degraded
	}, 20*time.Second, 10*time.Millisecond)
	n := local.Stats().Instances
	require.GreaterOrEqual(t, n, int64(2))

	var held []sluice.Slot
	for {
		s, d, err := local.Acquire(context.Background(), "uploads", "k")
		require.NoError(t, err)
		if !d.Allowed {
			break
		}
		held = append(held, s)
	}
	assert.Len(t, held, int(10/n), "FailLocal: the share ⌊Limit/N̂⌋")

	_, d, err := closed.Acquire(context.Background(), "uploads", "k")
	require.ErrorIs(t, err, sluice.ErrStoreUnavailable)
	assert.False(t, d.Allowed)

	for range 15 {
		s, d, err := open.Acquire(context.Background(), "uploads", "k")
		require.NoError(t, err)
		require.True(t, d.Allowed, "FailOpen admits every Acquire")
		s.Release() // queued for the store
	}

	srv.Restart()
	require.Eventually(t, func() bool { return !local.Stats().Degraded && !open.Stats().Degraded }, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, sluice.RenewInFlight(local))
	require.NoError(t, sluice.RenewInFlight(open))
	keys := inflightKeys(t, c, "down")
	require.Len(t, keys, 1)
	held2, err := c.ZCard(context.Background(), keys[0]).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(len(held)), held2, "the store counts the slots admitted while it was down")
	for _, s := range held {
		s.Release()
	}
	noLeasesLeft(t, c, "down")
}

// On a cluster every key's leases sit in one slot (the key is hash-tagged)
// and the renewal's pipelines (of BatchSize keys) are split by node.
func TestInFlightCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a 3-master cluster")
	}
	cl := redistest.StartCluster(t, 3)
	var ls []*sluice.Limiter
	for range 2 {
		l, err := sluice.New(sluice.Options{Redis: cl.Client(t), Prefix: "cl", Timeout: time.Second, BatchSize: 4}, uploads(5, policy.ModeDefault))
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		ls = append(ls, l)
	}
	var held []sluice.Slot
	for i := range 30 {
		key := "tenant-" + strconv.Itoa(i)
		got := fill(t, ls, key)
		require.Len(t, got, 5, key)
		held = append(held, got...)
	}
	leases := 0
	for _, l := range ls {
		require.NoError(t, sluice.RenewInFlight(l), "one pipeline, split by node")
		leases += sluice.InFlightLeases(l)
	}
	assert.Equal(t, 150, leases)
	for _, s := range held {
		s.Release()
	}
	// A release that met a renewal in flight (the limiters' own, every
	// third of a lease) is removed again right after it.
	c := cl.Client(t)
	var left atomic.Int64 // ForEachMaster calls its function on every master at once
	assert.Eventually(t, func() bool {
		left.Store(0)
		err := c.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
			keys, err := m.Keys(ctx, "cl:inflight:*").Result()
			left.Add(int64(len(keys)))
			return err
		})
		require.NoError(t, err)
		return left.Load() == 0
	}, 10*time.Second, 10*time.Millisecond, "every lease removed")
}

// SetRules refuses a fleet InFlight rule on a limiter that runs no sync,
// and takes one on a limiter that does.
func TestSetRulesInFlightFleet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	local, err := sluice.New(sluice.Options{Redis: srv.Client(t), Prefix: "setl"}, policy.Rule{Name: "api", Limit: 10, Window: time.Second, Mode: policy.Local})
	require.NoError(t, err)
	t.Cleanup(func() { _ = local.Close() })
	err = local.SetRules(policy.Rule{Name: "api", Limit: 10, Window: time.Second, Mode: policy.Local}, uploads(2, policy.ModeDefault))
	require.ErrorIs(t, err, policy.ErrInvalidRule)
	assert.Contains(t, err.Error(), "runs no sync")
	require.NoError(t, local.SetRules(policy.Rule{Name: "api", Limit: 10, Window: time.Second, Mode: policy.Local}, uploads(2, policy.Local)))

	ls := inflightFleet(t, 2, srv, sluice.Options{Prefix: "setf", Timeout: time.Second}, rateRule("api", 10))
	for _, l := range ls {
		require.NoError(t, l.SetRules(rateRule("api", 10), uploads(3, policy.ModeDefault)))
	}
	held := fill(t, ls, "k")
	assert.Len(t, held, 3)
	for _, s := range held {
		s.Release()
	}
	noLeasesLeft(t, srv.Client(t), "setf")
}
