package syncer

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestRegistryScript heartbeats, expires, looks at and removes instances.
func TestRegistryScript(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	ctx := ctxT(t, opTimeout)
	const reg = "t:instances"
	const ttl = 5000
	var first int64  // the earliest expiry, from the last run
	var absent int64 // whether the last run found no live entry of its instance
	run := func(id string, mode string) (nowMs, n int64) {
		t.Helper()
		v, err := registryScript.Run(ctx, c, []string{reg, epochKey(reg)}, id, ttl, mode, "").Slice()
		require.NoError(t, err)
		require.Len(t, v, 6)
		first, err = strconv.ParseInt(v[3].(string), 10, 64)
		require.NoError(t, err)
		var ok bool
		absent, ok = v[4].(int64)
		require.True(t, ok)
		sec, err := strconv.ParseInt(v[0].(string), 10, 64)
		require.NoError(t, err)
		usec, err := strconv.ParseInt(v[1].(string), 10, 64)
		require.NoError(t, err)
		require.True(t, usec >= 0 && usec < 1e6)
		n, ok = v[2].(int64)
		require.True(t, ok)
		return sec*1000 + usec/1000, n
	}

	before := storeTimeUs(t, c) / 1000
	nowMs, n := run("a", regBeat)
	after := storeTimeUs(t, c) / 1000
	assert.True(t, nowMs >= before && nowMs <= after, "TIME is the store's: %d not in [%d, %d]", nowMs, before, after)
	assert.Equal(t, int64(1), n)
	assert.Equal(t, int64(1), absent, "a's first heartbeat registers it")
	score, err := c.ZScore(ctx, reg, "a").Result()
	require.NoError(t, err)
	assert.Equal(t, float64(nowMs+ttl), score, "the score is the expiry time in ms, exactly")
	pttl, err := c.PTTL(ctx, reg).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, time.Duration(ttl)*time.Millisecond)
	assert.LessOrEqual(t, pttl, 2*time.Duration(ttl)*time.Millisecond)

	assert.Equal(t, nowMs+ttl, first, "the only member's expiry")

	time.Sleep(2 * time.Millisecond)
	_, n = run("b", regBeat)
	assert.Equal(t, int64(2), n)
	assert.Equal(t, nowMs+ttl, first, "the earliest expiry is a's, the oldest heartbeat")

	// An expired member is dropped by the next heartbeat.
	require.NoError(t, c.ZAdd(ctx, reg, redis.Z{Score: float64(nowMs - 1), Member: "dead"}).Err())
	_, n = run("a", regBeat)
	assert.Equal(t, int64(2), n)
	assert.Zero(t, absent, "a was registered")
	_, err = c.ZScore(ctx, reg, "dead").Result()
	assert.ErrorIs(t, err, redis.Nil)

	// An instance whose entry expired, still in the set, registers again.
	require.NoError(t, c.ZAdd(ctx, reg, redis.Z{Score: float64(nowMs - 1), Member: "late"}).Err())
	_, n = run("late", regBeat)
	assert.Equal(t, int64(3), n)
	assert.Equal(t, int64(1), absent, "late's expired entry does not count: the heartbeat registers it again")
	require.NoError(t, c.ZRem(ctx, reg, "late").Err())

	// A heartbeat moves the expiry forward.
	time.Sleep(5 * time.Millisecond)
	nowMs2, _ := run("a", regBeat)
	score2, err := c.ZScore(ctx, reg, "a").Result()
	require.NoError(t, err)
	assert.Equal(t, float64(nowMs2+ttl), score2)
	assert.Greater(t, score2, score)

	// Remove deletes the member and still returns TIME and the count.
	nowMs3, n := run("b", regRemove)
	assert.GreaterOrEqual(t, nowMs3, nowMs2)
	assert.Equal(t, int64(1), n)
	_, err = c.ZScore(ctx, reg, "b").Result()
	assert.ErrorIs(t, err, redis.Nil)
	members, err := c.ZRange(ctx, reg, 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, members)

	// Look returns the same, leaves the caller unregistered and the others
	// as they were, and still drops expired members.
	require.NoError(t, c.ZAdd(ctx, reg, redis.Z{Score: float64(nowMs - 1), Member: "dead"}).Err())
	_, n = run("c", regLook)
	assert.Equal(t, int64(1), n)
	assert.Equal(t, int64(1), absent, "c has no entry")
	assert.Equal(t, int64(score2), first, "a's expiry, untouched")
	members, err = c.ZRange(ctx, reg, 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, members, "c is not registered, dead is dropped")
	_, _ = run("a", regLook)
	assert.Zero(t, absent, "a look finds a's entry")
}
