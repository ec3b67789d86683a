package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redisproc"
)

// TestStartLocal: StartLocal gives a Target on loopback that a client
// reaches, until the server is stopped.
func TestStartLocal(t *testing.T) {
	redisproc.NeedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, target, err := StartLocal(ctx)
	require.NoError(t, err)
	t.Cleanup(l.Stop)
	require.Len(t, target.Addrs, 1)
	assert.False(t, target.Embedded)
	assert.Contains(t, target.Addrs[0], "127.0.0.1:")
	c := target.Client()
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	assert.Equal(t, "v", c.Get(ctx, "k").Val())

	l.Stop()
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	defer pcancel()
	assert.Error(t, c.Ping(pctx).Err(), "nothing answers once stopped")
}
