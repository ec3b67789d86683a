package syncer

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/keyname"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tableport"
)

// hashTag returns the part of a Redis key Redis Cluster hashes: the content of
// the first {...} if it is not empty, else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// TestCluster syncs keys spread over the slots of a 3-master cluster through a
// ClusterClient (pipelines split by node), decides reservations there, and
// survives SCRIPT FLUSH on every node.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	ctx := ctxT(t, opTimeout)
	geo := midGeometry(6)
	r := newRule(t, "api", geo, 1000, tableport.NoCap)
	rs := newRule(t, "strict", geo, 10, 0)
	s := startSyncer(t, testConfig(cc, "A"), r, rs)

	want := map[string]int64{}
	masters := map[string]bool{}
	for i := 0; i < 30; i++ {
		k := "user:" + strconv.Itoa(i)
		want[k] = int64(i%7 + 1)
		admit(t, s, r, k, i%7+1)

		name := r.keyName(k)
		assert.Equal(t, "api:"+string(keyname.Encode(nil, k)), hashTag(name), "the hash tag is the whole limiter key")
		slot, err := cc.ClusterKeySlot(ctx, name).Result()
		require.NoError(t, err)
		tagSlot, err := cc.ClusterKeySlot(ctx, hashTag(name)).Result()
		require.NoError(t, err)
		assert.Equal(t, tagSlot, slot)
		m, err := cc.MasterForKey(ctx, name)
		require.NoError(t, err)
		masters[m.Options().Addr] = true
	}
	require.Len(t, masters, 3, "the keys span every master")
	flush(t, s)
	for k, n := range want {
		assert.Equal(t, n, total(t, cc, r.keyName(k)), "total of %q", k)
	}
	assert.Zero(t, s.Stats().Failures)
	assert.Equal(t, 1, s.instanceCount())

	// Reservations are decided on the key's node.
	admitted := 0
	for range 12 {
		res, err := rs.Reserve(ctxT(t, opTimeout), "s", nil, 1)
		require.NoError(t, err)
		if res.Admitted {
			admitted++
		}
	}
	assert.Equal(t, 10, admitted)
	assert.Equal(t, int64(10), total(t, cc, rs.keyName("s")))

	// Every node forgets the script: the next calls get NOSCRIPT, the
	// script is loaded on every shard and the calls resent.
	require.NoError(t, cc.ScriptFlush(ctx).Err())
	for k := range want {
		admit(t, s, r, k, 1)
		want[k]++
	}
	flush(t, s)
	for k, n := range want {
		assert.Equal(t, n, total(t, cc, r.keyName(k)), "total of %q after SCRIPT FLUSH", k)
	}
	require.NoError(t, cc.ScriptFlush(ctx).Err())
	res, err := rs.Reserve(ctxT(t, opTimeout), "s2", nil, 3)
	require.NoError(t, err)
	assert.True(t, res.Admitted)
	assert.Equal(t, int64(3), total(t, cc, rs.keyName("s2")))
	assert.Zero(t, s.Stats().Failures)
}
