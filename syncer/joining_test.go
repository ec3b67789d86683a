package syncer

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestJoining: an instance is joining from its registration until a
// heartbeat finds that every other live instance has heartbeated since (so
// that every N̂ counts it) and again after an earlier heartbeat of its own
// saw that (so that each has pushed what it admitted before), however many instances registered after it, and
// not at all if it registers alone; an entry
// that stays silent (an instance that died without deregistering) holds it
// joining until the entry leaves the registry; a look that finds the
// instance's entry gone makes it joining again.
func TestJoining(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := ctxT(t, opTimeout)
	// Heartbeats are compared in whole ms: each step waits for the next.
	nextMs := func() { time.Sleep(2 * time.Millisecond) }

	a := startSyncer(t, testConfig(c, "A"))
	assert.False(t, a.isJoining(), "A is alone: whoever registers later counts it")
	assert.False(t, a.fleetView().Joining)
	nextMs()
	b := startSyncer(t, testConfig(c, "B"))
	assert.True(t, b.isJoining(), "A has not heartbeated since B registered")
	assert.True(t, b.fleetView().Joining)
	assert.Equal(t, 2, b.fleetView().Instances)
	nextMs()
	e := startSyncer(t, testConfig(c, "E"))
	assert.True(t, e.isJoining())
	nextMs()
	flush(t, a)
	assert.False(t, a.isJoining())
	assert.Equal(t, 3, a.fleetView().Instances)
	assert.True(t, b.isJoining(), "B has not heartbeated since: it cannot know")
	flush(t, b)
	assert.True(t, b.isJoining(), "A counts B since its last heartbeat, but what it admitted before may not be pushed")
	nextMs()
	flush(t, e)
	assert.True(t, e.isJoining(), "A and B heartbeated after E registered, once")
	nextMs()
	flush(t, a)
	flush(t, b)
	assert.False(t, b.isJoining(), "A heartbeated again after B saw it count B (its cycle before pushed), and E registered after B")
	assert.False(t, b.fleetView().Joining)
	assert.True(t, e.isJoining(), "E has not heartbeated since")
	nextMs()
	flush(t, a)
	flush(t, e)
	assert.False(t, e.isJoining(), "A and B heartbeated again after E saw them count it")

	// A silent entry whose last heartbeat is older than D's registration: D
	// stays joining while it lasts.
	now := storeTimeUs(t, c) / 1000
	require.NoError(t, c.ZAdd(ctx, "t:instances", redis.Z{Score: float64(now + a.cfg.InstanceTTL.Milliseconds()), Member: "dead"}).Err())
	nextMs()
	d := startSyncer(t, testConfig(c, "D"))
	nextMs()
	flush(t, a)
	flush(t, b)
	flush(t, e)
	nextMs()
	flush(t, d)
	assert.True(t, d.isJoining(), "the silent entry may not count D")
	assert.Equal(t, 5, d.fleetView().Instances)
	require.NoError(t, c.ZRem(ctx, "t:instances", "dead").Err()) // as if it expired
	nextMs()
	flush(t, d)
	assert.True(t, d.isJoining(), "every live instance heartbeated since D registered, once")
	nextMs()
	flush(t, a)
	flush(t, b)
	flush(t, e)
	nextMs()
	flush(t, d)
	assert.False(t, d.isJoining(), "every live instance heartbeated again")

	// The registry lost A's entry: A's look (a cycle back from an outage
	// looks; called here between two of the loop's cycles) sees it, its
	// next heartbeat registers it again, and the others' next heartbeats
	// count it.
	// As if it had expired: A's last heartbeat's expiry is taken as passed
	// (an entry gone before it could expire is a loss of the store's
	// writes, which rebuild.go handles).
	require.NoError(t, c.ZRem(ctx, "t:instances", "A").Err())
	a.beatAt = 0
	require.NoError(t, a.look(ctx))
	assert.True(t, a.isJoining(), "A's entry is gone")
	require.NoError(t, a.heartbeat(ctx))
	assert.True(t, a.isJoining(), "registered again: nobody has heartbeated since")
	nextMs()
	flush(t, b)
	flush(t, d)
	assert.True(t, a.isJoining(), "E has not heartbeated since")
	flush(t, e)
	nextMs()
	flush(t, a)
	assert.True(t, a.isJoining(), "every other instance heartbeated since, once")
	nextMs()
	flush(t, b)
	flush(t, d)
	flush(t, e)
	nextMs()
	flush(t, a)
	assert.False(t, a.isJoining())
}
