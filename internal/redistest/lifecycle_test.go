package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKillRestartNonPersistentComesBackEmpty(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	ctx := ctxTimeout(t, 20*time.Second)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	port := s.Port()

	s.Kill()
	require.Error(t, c.Ping(ctx).Err(), "a killed server must not answer")
	s.Kill() // idempotent

	s.Restart()
	require.Equal(t, port, s.Port())
	require.NoError(t, c.Ping(ctx).Err(), "the same client reconnects after Restart")
	_, err := c.Get(ctx, "k").Result()
	require.ErrorIs(t, err, redis.Nil, "a non-persistent server comes back empty")
	n, err := c.DBSize(ctx).Result()
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestKillRestartWithPersistenceKeepsData(t *testing.T) {
	t.Parallel()
	s := Start(t, WithPersistence())
	c := s.Client(t)
	ctx := ctxTimeout(t, 20*time.Second)
	for i := range 50 {
		require.NoError(t, c.Set(ctx, fmt.Sprint("k", i), i, 0).Err())
	}

	s.Kill()
	require.Error(t, c.Ping(ctx).Err())
	s.Restart()

	for i := range 50 {
		got, err := c.Get(ctx, fmt.Sprint("k", i)).Int()
		require.NoError(t, err, "key k%d must survive Kill+Restart with persistence", i)
		require.Equal(t, i, got)
	}
}

func TestStopRestart(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	ctx := ctxTimeout(t, 20*time.Second)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())

	s.Stop()
	require.Error(t, c.Ping(ctx).Err())
	s.Stop() // idempotent
	s.Kill() // and a no-op after Stop

	s.Restart()
	require.ErrorIs(t, c.Get(ctx, "k").Err(), redis.Nil, "a graceful stop writes nothing either")
	require.NoError(t, c.Set(ctx, "k", "v2", 0).Err())

	// Restart of a running server kills it first.
	s.Restart()
	require.ErrorIs(t, c.Get(ctx, "k").Err(), redis.Nil)
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	require.NoError(t, c.Set(ctxTimeout(t, 5*time.Second), "k", "v", 0).Err())

	s.Pause()
	began := time.Now()
	err := c.Get(ctxTimeout(t, 300*time.Millisecond), "k").Err()
	require.Error(t, err, "a paused server must not answer")
	var ne net.Error
	assert.True(t, errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()),
		"want a timeout, got %v", err)
	assert.Less(t, time.Since(began), 2*time.Second, "the context deadline bounds the call")

	s.Resume()
	got, err := c.Get(ctxTimeout(t, 5*time.Second), "k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", got)

	// A paused server is still killed and reaped by Stop and the cleanup.
	s.Pause()
	s.Stop()
	require.False(t, s.running())
}

// TestPausedServerIsCleanedUp leaves a server paused: the cleanup must still
// kill and reap it (the leak check in TestMain would catch a stuck waiter).
func TestPausedServerIsCleanedUp(t *testing.T) {
	t.Parallel()
	var pid int
	t.Run("inner", func(t *testing.T) {
		s := Start(t)
		s.Pause()
		pid = s.proc.pid
	})
	require.NotZero(t, pid)
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "redis-server pid %d survived the cleanup", pid)
}

func TestRestartFailsWhenPortStaysTaken(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Kill()
	l, err := net.Listen("tcp", s.Addr())
	require.NoError(t, err)
	defer l.Close()

	f := capture(t, func(tb testing.TB) {
		s.tb = tb
		s.Restart()
	})
	require.Contains(t, f.fatal, "restarting redis-server on "+s.Addr())
	require.Contains(t, f.fatal, "Address already in use")
}
