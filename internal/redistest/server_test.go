package redistest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// missingBinary is a redis-server name that is not in PATH.
const missingBinary = "redis-server-redistest-missing"

// withMissingServerBinary makes Start look for missingBinary in PATH.
func withMissingServerBinary() Option {
	return func(c *config) { c.serverBinary = missingBinary }
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
