package sluice

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// renewLoops counts the goroutines running a renewal loop of in-flight
// leases, by their stacks.
func renewLoops() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "sluice.(*inflight).renewLoop(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestRenewalLoopRunsWithFleetRules: the renewal of fleet leases runs only
// while the limiter has a fleet InFlight rule, or leases to look after: not
// for rate rules or Local InFlight rules, from the SetRules that adds a
// fleet rule, on while a slot of a rule that left is held, and not after
// the last one is released, nor after Close. Not parallel: it counts the
// process's goroutines (the parallel tests wait until it is done).
func TestRenewalLoopRunsWithFleetRules(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	api := policy.Rule{Name: "api", Limit: 100, Window: time.Second}
	local := policy.Rule{Name: "jobs", Limit: 2, InFlight: true, Mode: policy.Local}
	fleet := policy.Rule{Name: "uploads", Limit: 2, InFlight: true}
	require.Zero(t, renewLoops(), "a loop of an earlier test is still running")

	l, err := New(Options{Redis: srv.Client(t), SyncInterval: 20 * time.Millisecond}, api, local)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	stopped := func() bool { return !l.inf.running() && renewLoops() == 0 }
	assert.True(t, stopped(), "no fleet rule: no loop")

	for _, step := range []struct {
		name    string
		do      func()
		running bool
	}{
		{"a fleet rule added", func() { require.NoError(t, l.SetRules(api, local, fleet)) }, true},
		{"the fleet rule removed", func() { require.NoError(t, l.SetRules(api, local)) }, false},
		{"added again", func() { require.NoError(t, l.SetRules(api, fleet)) }, true},
	} {
		step.do()
		if step.running {
			assert.True(t, l.inf.running(), step.name)
			assert.Eventually(t, func() bool { return renewLoops() == 1 }, 5*time.Second, 5*time.Millisecond, step.name)
		} else {
			assert.Eventually(t, stopped, 5*time.Second, 5*time.Millisecond, step.name)
		}
	}

	// A slot held when its rule leaves is still renewed until released.
	s, d, err := l.Acquire(ctx, "uploads", "k")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, l.SetRules(api))
	ttl := l.inf.ttl
	time.Sleep(ttl + ttl/3) // past the lease: renewed, or it would have lapsed
	assert.True(t, l.inf.running(), "a slot held: the loop renews it")
	assert.Equal(t, 1, renewLoops())
	members, err := srv.Client(t).ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.h.zkey, Start: strconv.FormatInt(time.Now().UnixMilli(), 10), Stop: "+inf", ByScore: true}).Result()
	require.NoError(t, err)
	assert.Len(t, members, 1, "its lease is live")
	s.Release()
	assert.Eventually(t, stopped, 5*time.Second, 5*time.Millisecond, "the last slot released")

	require.NoError(t, l.SetRules(api, fleet))
	assert.Eventually(t, func() bool { return renewLoops() == 1 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, l.Close())
	assert.False(t, l.inf.running())
	assert.Zero(t, renewLoops(), "Close waits for the loop")
	require.ErrorIs(t, l.SetRules(api, fleet), ErrClosed)
	assert.Zero(t, renewLoops(), "none after Close")
}
