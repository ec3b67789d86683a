package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/localcache"
)

// TestCloseBoundedOnHungStore closes a syncer whose store hangs (SIGSTOP:
// connections are accepted, nothing is answered), through a client with
// go-redis's default options: a 5s read timeout that context deadlines do not
// shorten (ContextTimeoutEnabled is off), and 3 retries. The final flush's
// heartbeat hangs; Close must return once its context has ended and the read
// in flight has timed out, not wait for the client's retries (before the
// fix: about 20s for a 1s context).
func TestCloseBoundedOnHungStore(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{
		Addr:                     srv.Addr(),
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = c.Close() })
	cfg := testConfig(c, "A") // an hour between cycles: the op timeout is 2h
	r := newRule(t, "api", midGeometry(6), 1000, localcache.NoCap)
	s, err := newSyncer(cfg, r)
	require.NoError(t, err)
	require.NoError(t, s.Start(ctxT(t, opTimeout)))
	admit(t, s, r, "k", 3)

	srv.Pause()
	t.Cleanup(srv.Resume)              // before the kill of the server's own cleanup
	time.Sleep(200 * time.Millisecond) // a cycle is now waiting on the store
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err = s.Close(ctx)
	took := time.Since(start)
	assert.Error(t, err)
	// At most one read timeout (5s) for the read in flight, which nothing
	// can interrupt, or the context's second; generous slack.
	assert.Less(t, took, 8*time.Second, "Close waited for more than the read in flight")
	t.Logf("Close took %v: %v", took.Round(time.Millisecond), err)
}
