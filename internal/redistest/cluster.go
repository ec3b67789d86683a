package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

const (
	// clusterSlots is the number of hash slots of a Redis Cluster.
	clusterSlots = 16384
	// clusterCreateTimeout bounds `redis-cli --cluster create`.
	clusterCreateTimeout = 30 * time.Second
	// clusterHealthyTimeout bounds StartCluster's wait for a healthy cluster.
	clusterHealthyTimeout = 20 * time.Second
	// clusterPollInterval is the pause between two cluster health probes.
	clusterPollInterval = 50 * time.Millisecond
	// cliBinary is the redis-cli executable looked up in PATH.
	cliBinary = "redis-cli"
)

// Cluster is a Redis Cluster of real redis-server processes, masters only
// (no replicas), all on 127.0.0.1.
type Cluster struct {
	tb    testing.TB
	nodes []*Server
}

// StartCluster starts masters (at least 3) cluster-enabled redis-server
// processes, joins them with `redis-cli --cluster create --cluster-replicas 0`
// and waits until every node reports cluster_state:ok and sees all 16384
// slots covered. Nodes have no persistence and a 2s cluster-node-timeout.
// Everything is torn down in tb.Cleanup.
//
// Without redis-server or redis-cli in PATH, StartCluster fails the test when
// the CI environment variable is "true" and skips it otherwise, like Start.
func StartCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	if masters < 3 {
		tb.Fatalf("redistest: StartCluster needs at least 3 masters, got %d", masters)
	}
	cli, err := exec.LookPath(cliBinary)
	if err == nil {
		_, err = exec.LookPath(defaultServerBinary)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("redistest: %v: CI requires real Redis for StartCluster", err)
		}
		tb.Skipf("redistest: skipping, StartCluster needs redis-server and redis-cli in PATH (%v): "+
			"install redis-server (for example apt-get install redis-server, or brew install redis) to run it", err)
	}

	c := &Cluster{tb: tb}
	for range masters {
		c.nodes = append(c.nodes, start(tb, config{serverBinary: defaultServerBinary, cluster: true}))
	}

	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterCreateTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.WaitDelay = time.Second
	began := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: %s %s: %v\n%s", cli, strings.Join(args, " "), err, out)
	}
	created := time.Since(began)
	if err := c.waitHealthy(clusterHealthyTimeout); err != nil {
		tb.Fatalf("redistest: cluster %v created but not healthy: %v\nredis-cli output:\n%s", c.Addrs(), err, out)
	}
	tb.Logf("redistest: Redis Cluster of %d masters on %v (redis-cli create %v, healthy after %v)",
		masters, c.Addrs(), created.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	return c
}

// Addrs returns the "127.0.0.1:PORT" addresses of all nodes, in Node order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a new go-redis cluster client seeded with all node
// addresses, with the same small timeouts as Server.Client. It is closed in
// tb.Cleanup.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                    c.Addrs(),
		DialTimeout:              clientTimeout,
		DialerRetries:            1,
		ReadTimeout:              clientTimeout,
		WriteTimeout:             clientTimeout,
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Node returns the i-th node (a master), to Kill, Stop, Pause or Restart it
// on its own. A restarted node keeps its nodes.conf, so it rejoins the
// cluster with the same node ID and slots; but cluster nodes have no
// persistence, so the keys it held are LOST across a restart. Call
// WaitHealthy after Restart before expecting the cluster to answer.
func (c *Cluster) Node(i int) *Server {
	if i < 0 || i >= len(c.nodes) {
		c.tb.Fatalf("redistest: Node(%d) out of range: the cluster has %d nodes", i, len(c.nodes))
	}
	return c.nodes[i]
}

// WaitHealthy waits until every node reports cluster_state:ok and sees all
// 16384 slots covered, and fails the test after timeout. A node restarted
// with Restart typically needs a few seconds to be accepted again.
func (c *Cluster) WaitHealthy(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	began := time.Now()
	if err := c.waitHealthy(timeout); err != nil {
		tb.Fatalf("redistest: cluster %v: %v", c.Addrs(), err)
	}
	tb.Logf("redistest: cluster healthy after %v", time.Since(began).Round(time.Millisecond))
}

func (c *Cluster) waitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.checkHealthy()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy after %v: %w", timeout, err)
		}
		time.Sleep(clusterPollInterval)
	}
}

// checkHealthy checks every node once.
func (c *Cluster) checkHealthy() error {
	for i, n := range c.nodes {
		if !n.running() {
			return fmt.Errorf("node %d (%s) is not running", i, n.Addr())
		}
		r, err := do(context.Background(), n.Addr(), probeTimeout, []string{"CLUSTER", "INFO"}, []string{"CLUSTER", "SLOTS"})
		if err != nil {
			return fmt.Errorf("node %d (%s): %w", i, n.Addr(), err)
		}
		info, _ := r[0].(string)
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("node %d (%s): %s", i, n.Addr(), firstLine(info, "cluster_state:"))
		}
		covered, err := slotsCovered(r[1])
		if err != nil {
			return fmt.Errorf("node %d (%s): CLUSTER SLOTS: %w", i, n.Addr(), err)
		}
		if covered != clusterSlots {
			return fmt.Errorf("node %d (%s): CLUSTER SLOTS covers %d of %d slots", i, n.Addr(), covered, clusterSlots)
		}
	}
	return nil
}

// slotsCovered adds up the slot ranges of a CLUSTER SLOTS reply:
// [[start, end, [ip, port, id, ...], ...], ...], each range with a master.
func slotsCovered(reply any) (int, error) {
	ranges, ok := reply.([]any)
	if !ok {
		return 0, fmt.Errorf("unexpected reply %T", reply)
	}
	seen := make([]bool, clusterSlots)
	covered := 0
	for _, r := range ranges {
		rr, ok := r.([]any)
		if !ok || len(rr) < 3 {
			return 0, errors.New("malformed slot range")
		}
		start, ok1 := rr[0].(int64)
		end, ok2 := rr[1].(int64)
		if !ok1 || !ok2 || start < 0 || end >= clusterSlots || start > end {
			return 0, fmt.Errorf("bad slot range %v-%v", rr[0], rr[1])
		}
		for s := start; s <= end; s++ {
			if !seen[s] {
				seen[s] = true
				covered++
			}
		}
	}
	return covered, nil
}

// firstLine returns the line of s starting with prefix, or a placeholder.
func firstLine(s, prefix string) string {
	for line := range strings.Lines(s) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(line)
		}
	}
	return prefix + "?"
}
