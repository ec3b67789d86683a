package redistest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSentinelFailover: a write acknowledged by the master and its replica
// survives the master's crash; the sentinels promote the replica, and the
// failover client follows them to it and takes writes again.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	require.Len(t, s.SentinelAddrs(), 3)
	c := s.Client(t)
	ctx := ctxTimeout(t, time.Minute)

	old := s.MasterAddr(t)
	require.Equal(t, s.nodes[0].Addr(), old, "the node started as master is the master")
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	acked, err := c.Wait(ctx, 1, 5000).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, acked, "the replica acknowledged the write")

	require.Equal(t, old, s.KillMaster(t))
	began := time.Now()
	promoted := s.WaitFailover(t, old, 30*time.Second)
	failover := time.Since(began)
	assert.Equal(t, s.nodes[1].Addr(), promoted, "the replica is promoted")
	assert.Equal(t, promoted, s.MasterAddr(t))

	// The client may still hold a connection to the dead master: its first
	// commands fail until it asks the sentinels again.
	var tries int
	for {
		tries++
		err = c.Set(ctx, "k2", "v2", 0).Err()
		if err == nil {
			break
		}
		require.Less(t, tries, 100, "the failover client does not reach the new master: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got, "the replicated write survived")
	assert.Equal(t, promoted, s.Node(promoted).Addr())
	assert.Nil(t, s.Node("127.0.0.1:1"))
	t.Logf("failover: master %s killed, %s promoted after %v; the client wrote again at try %d", old, promoted, failover.Round(time.Millisecond), tries)
}

// TestSentinelUnreplicated: what the master acknowledged while its replica
// was frozen is lost in the failover; what the replica had received before
// survives.
func TestSentinelUnreplicated(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	ctx := ctxTimeout(t, time.Minute)
	old := s.MasterAddr(t)
	direct := s.Node(old).Client(t)
	require.NoError(t, direct.Set(ctx, "before", "v", 0).Err())
	acked, err := direct.Wait(ctx, 1, 5000).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, acked)

	// A writer counting what the master acknowledges, until it dies.
	var last atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := direct.Incr(context.Background(), "counter").Result()
			if err != nil {
				return
			}
			last.Store(n)
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(100 * time.Millisecond)
	beforeLag := last.Load()
	require.Equal(t, old, s.KillMasterUnreplicated(t, 200*time.Millisecond, 32<<20))
	<-done
	promoted := s.WaitFailover(t, old, 30*time.Second)
	require.NotEqual(t, old, promoted)

	c := s.Node(promoted).Client(t)
	got, err := c.Get(ctx, "before").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got, "a write the replica had received survives")
	kept, err := c.Get(ctx, "counter").Int64()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, kept, beforeLag, "what was replicated before the lag survives")
	assert.Less(t, kept, last.Load(), "the increments acknowledged during the lag are lost")
	t.Logf("counter: %d acknowledged, %d on the promoted replica (%d before the lag)", last.Load(), kept, beforeLag)
}

// TestSentinelNeedsBinary: without redis-sentinel in PATH, the set-up
// fails the test in CI and skips it elsewhere, naming the package.
func TestSentinelNeedsBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, ci := range []string{"true", ""} {
		t.Setenv("CI", ci)
		f := capture(t, func(tb testing.TB) { need(tb, sentinelBinary) })
		if ci == "true" {
			assert.Contains(t, f.fatal, "redis-sentinel not found: CI requires real Redis")
			assert.Contains(t, f.fatal, "apt-get install redis-sentinel")
			assert.Empty(t, f.skip)
		} else {
			assert.Empty(t, f.fatal)
			assert.Contains(t, f.skip, "install redis-sentinel")
		}
	}
}

// TestPairs: a flat SENTINEL MASTER reply as a map.
func TestPairs(t *testing.T) {
	t.Parallel()
	m, err := pairs([]any{"name", "m", "num-slaves", "1"})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"name": "m", "num-slaves": "1"}, m)
	_, err = pairs([]any{"odd"})
	assert.Error(t, err)
	_, err = pairs("not an array")
	assert.Error(t, err)
}
