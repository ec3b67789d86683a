package systemtest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
)

// waitFor polls cond every 10ms for up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func degraded(ls []*sluice.Limiter, want bool) func() bool {
	return func() bool {
		for _, l := range ls {
			if l.Stats().Degraded != want {
				return false
			}
		}
		return true
	}
}

// slowest tracks the longest check.
type slowest struct{ ns atomic.Int64 }

func (s *slowest) time(f func()) {
	start := time.Now()
	f()
	d := int64(time.Since(start))
	for {
		old := s.ns.Load()
		if d <= old || s.ns.CompareAndSwap(old, d) {
			return
		}
	}
}

// TestOutageFailLocal kills Redis under four instances: checks keep
// answering within the timeout, each instance enforces Limit/N̂ on its own,
// and after Redis restarts empty the counts made during the outage arrive
// and those it lost are restored.
func TestOutageFailLocal(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rule := policy.Rule{Name: "api", Limit: 400, Window: time.Minute}
	const timeout = 50 * time.Millisecond
	opts := sluice.Options{SyncInterval: 50 * time.Millisecond, Timeout: timeout, ErrorBudget: 0.05}
	ls := fleet(t, 4, func() redis.UniversalClient { return srv.Client(t) }, opts, rule)

	// Some traffic before the outage, pushed.
	var before int64
	for _, l := range ls {
		for range 20 {
			d, err := l.Allow(context.Background(), rule.Name, "k")
			require.NoError(t, err)
			if d.Allowed {
				before++
			}
		}
	}
	flushAll(t, ls)

	srv.Kill()
	var slow slowest
	// Checks made while the limiters have not noticed yet still answer.
	var during atomic.Int64
	for _, l := range ls {
		slow.time(func() {
			d, err := l.Allow(context.Background(), rule.Name, "k")
			require.NoError(t, err)
			if d.Allowed {
				during.Add(1)
			}
		})
	}
	waitFor(t, 5*time.Second, "every limiter to notice the outage", degraded(ls, true))

	perInstance := make([]int64, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 300 {
				slow.time(func() {
					d, err := l.Allow(context.Background(), rule.Name, "k")
					assert.NoError(t, err)
					if d.Allowed {
						perInstance[i]++
					}
				})
			}
		}()
	}
	wg.Wait()
	share := rule.Limit / 4
	// FailLocal: each instance admits its part of what the window had
	// left when the store went down, ⌊(L − G)·⌊L/N̂⌋/L⌋ with G the pushed
	// count its view holds: so the fleet's window that spans the start of
	// the outage stays within L(1+ε), instead of the N̂ whole shares on top
	// of what was admitted before.
	fair := (rule.Limit - before) * share / rule.Limit
	for i, n := range perInstance {
		assert.LessOrEqual(t, n, fair, "instance %d during the outage", i)
		assert.Greater(t, n, int64(0), "instance %d admits its share", i)
	}
	bound := rule.Limit + int64(opts.ErrorBudget*float64(rule.Limit))
	assert.LessOrEqual(t, before+during.Load()+total(perInstance), bound, "the window spanning the start of the outage")
	assert.Less(t, time.Duration(slow.ns.Load()), timeout+time.Second, "a check took too long")

	srv.Restart() // empty: the store lost everything
	waitFor(t, 10*time.Second, "every limiter to see the store again", degraded(ls, false))
	closeAll(t, ls)
	got := sum(buckets(t, srv.Client(t), "sluice", rule.Name, "k", rulegeo.SubWindow(rule)))
	// The counts pushed before were lost with the store and are restored
	// from the instances' views, the largest per bucket: a view pulled
	// before another instance gave back its lease's unused units still
	// counts them (the final flush returns them one instance after the
	// other), so Redis may count more than was admitted, never less.
	assert.GreaterOrEqual(t, got, before+during.Load()+total(perInstance),
		"the counts made during the outage arrive, and those lost with the store are restored%s", syncCounts(ls))
	for i, l := range ls {
		assert.Equal(t, int64(1), l.Stats().Sync.Rebuilds, "instance %d saw the loss", i)
	}
	t.Logf("before %d, during-detection %d, per instance %v, Redis holds %d; slowest check %v", before, during.Load(), perInstance, got, time.Duration(slow.ns.Load()))
}

// TestOutagePersistentStore kills a Redis that keeps its data: after the
// restart, Redis holds exactly everything admitted, before and during the
// outage.
func TestOutagePersistentStore(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithPersistence())
	// A limit no machine reaches in the test's second: every check is
	// admitted, so what Redis holds can be compared with what was admitted.
	rule := policy.Rule{Name: "api", Limit: 1_000_000, Window: time.Minute}
	opts := sluice.Options{SyncInterval: 20 * time.Millisecond, ErrorBudget: 0.5}
	ls := fleet(t, 4, func() redis.UniversalClient { return srv.Client(t) }, opts, rule)
	var admitted atomic.Int64
	stop := make(chan struct{})
	wait := perLimiter(ls, stop, func(_ int, l *sluice.Limiter, _ int) bool {
		d, err := l.Allow(context.Background(), rule.Name, "k")
		if err == nil && d.Allowed {
			admitted.Add(1)
		}
		time.Sleep(100 * time.Microsecond)
		return true
	})
	time.Sleep(300 * time.Millisecond) // syncs in flight while we kill
	srv.Kill()
	time.Sleep(300 * time.Millisecond)
	srv.Restart()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wait()
	waitFor(t, 10*time.Second, "recovery", degraded(ls, false))
	closeAll(t, ls)
	got := sum(buckets(t, srv.Client(t), "sluice", rule.Name, "k", rulegeo.SubWindow(rule)))
	assert.Equal(t, admitted.Load(), got, "Redis counts every admission exactly once%s", syncCounts(ls))
	assert.Less(t, admitted.Load(), rule.Limit, "the test stayed under the limit")
}

// TestFailureModes checks what checks return while the store is down, per
// failure mode and rule mode.
func TestFailureModes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode      policy.FailureMode
		ruleMode  policy.Mode
		wantErr   error
		wantAllow int // of 50 checks, with L=20 and N̂=1
	}{
		{policy.FailLocal, policy.Eventual, nil, 20},
		{policy.FailLocal, policy.Strict, nil, 20},
		{policy.FailOpen, policy.Eventual, nil, 50},
		{policy.FailOpen, policy.Strict, nil, 50},
		{policy.FailClosed, policy.Eventual, sluice.ErrStoreUnavailable, 0},
		{policy.FailClosed, policy.Strict, sluice.ErrStoreUnavailable, 0},
	}
	for _, tc := range cases {
		t.Run(tc.mode.String()+"/"+tc.ruleMode.String(), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rule := policy.Rule{Name: "r", Limit: 20, Window: time.Minute, Mode: tc.ruleMode}
			l, err := sluice.New(sluice.Options{Redis: srv.Client(t), FailureMode: tc.mode, SyncInterval: 20 * time.Millisecond}, rule)
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			srv.Kill()
			waitFor(t, 5*time.Second, "the outage to be noticed", degraded([]*sluice.Limiter{l}, true))
			allowed := 0
			for range 50 {
				d, err := l.Allow(context.Background(), rule.Name, "k")
				if tc.wantErr != nil {
					require.ErrorIs(t, err, tc.wantErr)
					require.False(t, d.Allowed)
					continue
				}
				require.NoError(t, err)
				if d.Allowed {
					allowed++
				}
			}
			assert.Equal(t, tc.wantAllow, allowed)
		})
	}
}

func TestErrorsAreSentinels(t *testing.T) {
	t.Parallel()
	l, err := sluice.New(sluice.Options{}, policy.Rule{Name: "r", Limit: 5, Window: time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = l.Allow(ctx, "nope", "k")
	assert.ErrorIs(t, err, sluice.ErrUnknownRule)
	for _, n := range []int64{0, -1, 6} {
		_, err = l.AllowN(ctx, "r", "k", n)
		assert.ErrorIs(t, err, sluice.ErrInvalidCost, "cost %d", n)
	}
	_, err = l.Allow(ctx, "r", string(make([]byte, sluice.DefaultMaxKeyLength+1)))
	assert.ErrorIs(t, err, sluice.ErrKeyTooLong)
	require.NoError(t, l.Close())
	require.NoError(t, l.Close(), "Close is idempotent")
	_, err = l.Allow(ctx, "r", "k")
	assert.True(t, errors.Is(err, sluice.ErrClosed))
	assert.ErrorIs(t, l.Flush(ctx), sluice.ErrClosed)
}

// TestOutageRecovery kills a Redis that keeps its data under four
// instances that had admitted some of a key's limit, lets each admit its
// part of the rest while it is down, restarts it and hammers one instance
// from the moment it is back: what the fleet admits in the window stays
// near L — the instance back first stays on its share until the others have
// had time to push their outage counts (the recovery grace).
func TestOutageRecovery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		long bool // the outage outlasts InstanceTTL: the store comes back with an empty registry
	}{
		{name: "short"},
		{name: "longer than InstanceTTL", long: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			outageRecovery(t, tc.long)
		})
	}
}

// outageRecovery is one run of TestOutageRecovery.
func outageRecovery(t *testing.T, long bool) {
	srv := redistest.Start(t, redistest.WithPersistence())
	rule := policy.Rule{Name: "api", Limit: 400, Window: time.Hour}
	// A Timeout no loaded test machine reaches: the bound assumes that each
	// instance's first sync cycle back pushes its outage counts, and a cycle
	// that times out leaves them pending for later.
	opts := sluice.Options{SyncInterval: 50 * time.Millisecond, Timeout: time.Second, ErrorBudget: 0.05}
	ls := fleet(t, 4, func() redis.UniversalClient { return srv.Client(t) }, opts, rule)
	ctx := context.Background()
	var admitted atomic.Int64
	allow := func(l *sluice.Limiter) {
		d, err := l.Allow(ctx, rule.Name, "k")
		assert.NoError(t, err)
		if d.Allowed {
			admitted.Add(1)
		}
	}
	for _, l := range ls {
		for range 20 {
			allow(l)
		}
	}
	flushAll(t, ls)
	srv.Kill()
	waitFor(t, 5*time.Second, "every limiter to notice the outage", degraded(ls, true))
	for _, l := range ls {
		for range 150 {
			allow(l)
		}
	}
	if long {
		// The default InstanceTTL at this SyncInterval is 3 s: every
		// registry entry expires before the store is back.
		time.Sleep(3500 * time.Millisecond)
	}
	outage := admitted.Load()
	srv.Restart()
	waitFor(t, 10*time.Second, "the first limiter to see the store again", func() bool { return !ls[0].Stats().Degraded })
	deadline := time.Now().Add(20 * opts.SyncInterval)
	for time.Now().Before(deadline) {
		allow(ls[0])
		time.Sleep(100 * time.Microsecond)
	}
	first := admitted.Load()
	waitFor(t, 10*time.Second, "every limiter to see the store again", degraded(ls, false))
	var last []int64
	for _, l := range ls {
		before := admitted.Load()
		for range 50 {
			allow(l)
		}
		last = append(last, admitted.Load()-before)
	}
	flushAll(t, ls)
	got := keyTotal(t, srv.Client(t), "sluice", rule, "k")
	t.Logf("admitted %d (%d by the end of the outage, %d by the first back, then %v), Redis holds %d", admitted.Load(), outage, first, last, got)
	assert.Equal(t, admitted.Load(), got, "Redis counts every admission exactly once%s", syncCounts(ls))
	assert.LessOrEqual(t, admitted.Load(), rule.Limit+int64(opts.ErrorBudget*float64(rule.Limit)), "the window around the outage")
}
