package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// missingBinary is a redis-server name that is not in PATH.
const missingBinary = "redis-server-redistest-missing"

func withMissingServerBinary() Option {
	return func(c *config) { c.serverBinary = missingBinary }
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestFreePort(t *testing.T) {
	t.Parallel()
	p := FreePort(t)
	require.Greater(t, p, 0)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	require.NoError(t, err, "FreePort returned a port we cannot bind")
	require.NoError(t, l.Close())
}

func TestStartSetGet(t *testing.T) {
	t.Parallel()
	s := Start(t)
	require.True(t, s.running(), "a real redis-server process")
	require.NotEqual(t, 6379, s.Port())
	require.Equal(t, "127.0.0.1:"+strconv.Itoa(s.Port()), s.Addr())

	c := s.Client(t)
	ctx := ctxTimeout(t, 5*time.Second)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
}

// TestStartDefaults checks the configuration every server gets.
func TestStartDefaults(t *testing.T) {
	t.Parallel()
	s := Start(t, WithArgs("--maxmemory", "12345678"))
	c := s.Client(t)
	ctx := ctxTimeout(t, 5*time.Second)

	cfg, err := c.ConfigGet(ctx, "*").Result()
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", cfg["bind"])
	assert.Equal(t, strconv.Itoa(s.Port()), cfg["port"])
	assert.Equal(t, "", cfg["save"])
	assert.Equal(t, "no", cfg["appendonly"])
	assert.Equal(t, "no", cfg["protected-mode"])
	assert.Equal(t, "no", cfg["daemonize"])
	assert.Equal(t, "no", cfg["cluster-enabled"])
	assert.Equal(t, "12345678", cfg["maxmemory"], "WithArgs is applied")
	assert.Equal(t, filepath.Join(s.dir, "redis.log"), cfg["logfile"])
	assert.Equal(t, s.dir, cfg["dir"])
	_, err = os.Stat(cfg["logfile"])
	assert.NoError(t, err, "log file exists")

	p := Start(t, WithPersistence())
	pcfg, err := p.Client(t).ConfigGet(ctx, "append*").Result()
	require.NoError(t, err)
	assert.Equal(t, "yes", pcfg["appendonly"])
	assert.Equal(t, "always", pcfg["appendfsync"])
}

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

func TestStartFailureReportsLogTail(t *testing.T) {
	t.Parallel()
	f := capture(t, func(tb testing.TB) {
		Start(tb, WithArgs("--no-such-directive", "1"))
	})
	require.Contains(t, f.fatal, "redistest: starting redis-server")
	require.Contains(t, f.fatal, "exited during startup")
	require.Contains(t, f.fatal, "no-such-directive", "the message carries the tail of the server's output")
}

func TestLaunchDetectsBusyPort(t *testing.T) {
	t.Parallel()
	// Occupy a port, then let a server try it: launch must report a busy
	// port (so Start would pick another one) and leave nothing running.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()

	s := Start(t)
	s.Kill()
	s.port = l.Addr().(*net.TCPAddr).Port
	err = s.launch()
	require.ErrorIs(t, err, errPortBusy)
	require.Nil(t, s.proc)
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

// The missing-Redis tests set CI, so they cannot run in parallel.

// TestMissingRedisSkipsOutsideCI: without redis-server in PATH and outside
// CI, Start skips the test and says what to install.
func TestMissingRedisSkipsOutsideCI(t *testing.T) {
	t.Setenv("CI", "")
	f := capture(t, func(tb testing.TB) {
		Start(tb, withMissingServerBinary())
	})
	require.Empty(t, f.fatal)
	require.Contains(t, f.skip, "needs a real redis-server")
	require.Contains(t, f.skip, missingBinary)
	require.Contains(t, f.skip, "install redis-server")
}

func TestMissingRedisFailsInCI(t *testing.T) {
	t.Setenv("CI", "true")
	f := capture(t, func(tb testing.TB) {
		Start(tb, withMissingServerBinary())
	})
	require.Equal(t, "redis-server not found: CI requires real Redis", f.fatal)
}
