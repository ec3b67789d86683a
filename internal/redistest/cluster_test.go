package redistest

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	require.Len(t, c.Addrs(), 3)
	cc := c.Client(t)
	ctx := ctxTimeout(t, 40*time.Second)

	const keys = 100
	for i := range keys {
		require.NoError(t, cc.Set(ctx, fmt.Sprint("key:", i), i, 0).Err())
	}
	for i := range keys {
		got, err := cc.Get(ctx, fmt.Sprint("key:", i)).Int()
		require.NoError(t, err)
		require.Equal(t, i, got)
	}

	// The keys really are spread over all masters.
	perNode := make([]int64, 3)
	var total int64
	for i := range 3 {
		n, err := c.Node(i).Client(t).DBSize(ctx).Result()
		require.NoError(t, err)
		assert.Positive(t, n, "node %d holds no keys", i)
		perNode[i] = n
		total += n
	}
	require.EqualValues(t, keys, total)

	// Kill one master and bring it back: it rejoins with the same node ID
	// and slots (nodes.conf is kept) but without its keys (no persistence).
	node := c.Node(1)
	nodeClient := node.Client(t)
	id, err := nodeClient.ClusterMyID(ctx).Result()
	require.NoError(t, err)

	node.Kill()
	require.Error(t, nodeClient.Ping(ctx).Err())
	node.Restart()
	c.WaitHealthy(t, 20*time.Second)

	id2, err := nodeClient.ClusterMyID(ctx).Result()
	require.NoError(t, err)
	require.Equal(t, id, id2, "the restarted node keeps its identity")

	missing := 0
	for i := range keys {
		got, err := cc.Get(ctx, fmt.Sprint("key:", i)).Int()
		if err == redis.Nil {
			missing++
			continue
		}
		require.NoError(t, err)
		require.Equal(t, i, got)
	}
	require.EqualValues(t, perNode[1], missing, "exactly the restarted master's keys are lost")

	for i := range keys {
		require.NoError(t, cc.Set(ctx, fmt.Sprint("key:", i), i, 0).Err(), "the cluster takes writes again")
	}
}

func TestClusterNeedsThreeMasters(t *testing.T) {
	t.Parallel()
	f := capture(t, func(tb testing.TB) { StartCluster(tb, 2) })
	require.Contains(t, f.fatal, "at least 3 masters")
}
