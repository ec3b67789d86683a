package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sentinelBinary is the Redis Sentinel executable looked up in PATH
	// (Debian's redis-sentinel package).
	sentinelBinary = "redis-sentinel"
	// SentinelMasterName is the name the sentinels of StartSentinel monitor
	// their master under (FailoverOptions.MasterName).
	SentinelMasterName = "redistest"
	// SentinelDownAfter is the sentinels' down-after-milliseconds: how
	// long the master must not answer before a sentinel thinks it down.
	SentinelDownAfter = 500 * time.Millisecond
	// sentinelFailoverTimeout is the sentinels' failover-timeout: how long
	// a failover may take before another sentinel tries again, and the
	// pause between two failovers of the same master.
	sentinelFailoverTimeout = 2 * time.Second
	// sentinels is how many sentinels StartSentinel runs; quorum is the
	// number that must agree the master is down.
	sentinels = 3
	quorum    = 2
	// sentinelReadyTimeout bounds StartSentinel's wait for the replica to
	// be in sync and the sentinels to know the replica and each other
	// (they announce themselves every 2 s).
	sentinelReadyTimeout = 30 * time.Second
	// sentinelPollInterval is the pause between two probes of the set-up.
	sentinelPollInterval = 50 * time.Millisecond
	// fillerTimeout bounds KillMasterUnreplicated's write of its filler
	// (tens of megabytes: more than a probe's second on a loaded machine).
	fillerTimeout = 15 * time.Second
)

// Sentinel is a Redis Sentinel set-up of real processes, all on 127.0.0.1: a
// master, one replica of it and three sentinels monitoring the master under
// SentinelMasterName (quorum 2, down-after-milliseconds 500, failover-timeout
// 2000). The data nodes have no persistence; replication is diskless with
// no delay. Everything is torn down in tb.Cleanup.
type Sentinel struct {
	tb        testing.TB
	nodes     []*Server // the data nodes: [0] started as the master, [1] as its replica
	sentinels []*Server
}

// StartSentinel starts the set-up and waits until the replica is in sync and
// every sentinel knows the master, the replica and the two other sentinels,
// so that a failover can be agreed on. It fails the test if that takes more
// than 30 s.
//
// Without redis-server or redis-sentinel in PATH, StartSentinel fails the
// test when the CI environment variable is "true" and skips it otherwise,
// like Start.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	need(tb, defaultServerBinary)
	need(tb, sentinelBinary)
	began := time.Now()
	// A replica of a replica never happens here, but either node may be
	// the master after a failover: both sync without delay.
	repl := []string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
	master := start(tb, config{serverBinary: defaultServerBinary, args: repl})
	replica := start(tb, config{serverBinary: defaultServerBinary,
		args: append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port())}, repl...)})
	s := &Sentinel{tb: tb, nodes: []*Server{master, replica}}

	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		SentinelMasterName, master.Port(), quorum, SentinelDownAfter.Milliseconds(), sentinelFailoverTimeout.Milliseconds())
	for range sentinels {
		s.sentinels = append(s.sentinels, start(tb, config{serverBinary: sentinelBinary, sentinel: true, sentinelConf: conf}))
	}
	if err := s.waitReady(sentinelReadyTimeout); err != nil {
		tb.Fatalf("redistest: sentinel set-up not ready: %v", err)
	}
	tb.Logf("redistest: Sentinel set-up: master %s, replica %s, sentinels %v (ready after %v)",
		master.Addr(), replica.Addr(), s.SentinelAddrs(), time.Since(began).Round(time.Millisecond))
	return s
}

// SentinelAddrs returns the sentinels' "127.0.0.1:PORT" addresses.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, n := range s.sentinels {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Node returns the data node with address addr (the master or the replica,
// whichever it is now), or nil.
func (s *Sentinel) Node(addr string) *Server {
	for _, n := range s.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// FailoverOptions returns go-redis options for a failover client of the
// set-up, with the same small timeouts as Server.Client (go-redis turns
// maintenance notifications off for failover clients).
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{
		MasterName:            SentinelMasterName,
		SentinelAddrs:         s.SentinelAddrs(),
		DialTimeout:           clientTimeout,
		DialerRetries:         1,
		ReadTimeout:           clientTimeout,
		WriteTimeout:          clientTimeout,
		ContextTimeoutEnabled: true,
	}
}

// Client returns a new go-redis failover client (redis.NewFailoverClient
// with FailoverOptions): it asks the sentinels for the master and follows a
// failover. It is closed in tb.Cleanup.
func (s *Sentinel) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewFailoverClient(s.FailoverOptions())
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// MasterAddr returns the master's address as every sentinel reports it
// (SENTINEL GET-MASTER-ADDR-BY-NAME), failing the test if they disagree or
// do not answer.
func (s *Sentinel) MasterAddr(tb testing.TB) string {
	tb.Helper()
	addr, err := s.masterAddr()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return addr
}

// KillMaster kills the current master with SIGKILL (a crash: whatever its
// replica had not received is lost) and returns its address. The sentinels
// then fail over to the replica; WaitFailover waits for that.
func (s *Sentinel) KillMaster(tb testing.TB) string {
	tb.Helper()
	addr := s.MasterAddr(tb)
	n := s.Node(addr)
	if n == nil {
		tb.Fatalf("redistest: the sentinels report master %s, not a node of the set-up", addr)
	}
	n.Kill()
	return addr
}

// KillMasterUnreplicated kills the master like KillMaster, but only after
// its replica has received nothing for lag: the replica is frozen
// (SIGSTOP), the master is sent a value of filler bytes (more than the
// kernel's socket buffers hold, so that what the master writes after it
// stays in the master's own output buffer), lag passes, the master is
// killed and the replica resumed. Everything written to the master during
// lag is lost with it, as a replica that lags behind loses it in a real
// crash. Keep lag under SentinelDownAfter, or the sentinels may think the
// frozen replica down and not promote it.
func (s *Sentinel) KillMasterUnreplicated(tb testing.TB, lag time.Duration, filler int) string {
	tb.Helper()
	addr := s.MasterAddr(tb)
	master := s.Node(addr)
	if master == nil {
		tb.Fatalf("redistest: the sentinels report master %s, not a node of the set-up", addr)
	}
	var replica *Server
	for _, n := range s.nodes {
		if n != master {
			replica = n
		}
	}
	replica.Pause()
	_, err := doTLS(context.Background(), master.Addr(), master.TLSConfig(), fillerTimeout,
		[]string{"SET", "redistest:filler", strings.Repeat("x", filler)})
	if err != nil {
		replica.Resume()
		tb.Fatalf("redistest: writing the filler to the master %s: %v", addr, err)
	}
	time.Sleep(lag)
	master.Kill()
	replica.Resume()
	return addr
}

// WaitFailover waits until every sentinel reports a master other than old
// and that master says it is one (ROLE), and returns its address. It fails
// the test after timeout.
func (s *Sentinel) WaitFailover(tb testing.TB, old string, timeout time.Duration) string {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		var addr string
		if addr, err = s.masterAddr(); err == nil {
			if addr == old {
				err = fmt.Errorf("the sentinels still report master %s", old)
			} else if err = s.isMaster(addr); err == nil {
				return addr
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: no failover from %s within %v: %v", old, timeout, err)
		}
		time.Sleep(sentinelPollInterval)
	}
}

// masterAddr asks every sentinel for the master's address.
func (s *Sentinel) masterAddr() (string, error) {
	var addr string
	for i, n := range s.sentinels {
		r, err := n.do(context.Background(), []string{"SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMasterName})
		if err != nil {
			return "", fmt.Errorf("sentinel %d (%s): %w", i, n.Addr(), err)
		}
		hp, ok := r[0].([]any)
		if !ok || len(hp) != 2 {
			return "", fmt.Errorf("sentinel %d (%s): GET-MASTER-ADDR-BY-NAME answered %v", i, n.Addr(), r[0])
		}
		a := fmt.Sprintf("%v:%v", hp[0], hp[1])
		if i > 0 && a != addr {
			return "", fmt.Errorf("the sentinels disagree on the master: %s and %s", addr, a)
		}
		addr = a
	}
	return addr, nil
}

// isMaster checks that the data node at addr says it is a master.
func (s *Sentinel) isMaster(addr string) error {
	n := s.Node(addr)
	if n == nil {
		return fmt.Errorf("master %s is not a node of the set-up", addr)
	}
	r, err := n.do(context.Background(), []string{"ROLE"})
	if err != nil {
		return fmt.Errorf("%s: ROLE: %w", addr, err)
	}
	role, _ := r[0].([]any)
	if len(role) == 0 || role[0] != "master" {
		return fmt.Errorf("%s: ROLE answered %v", addr, r[0])
	}
	return nil
}

// waitReady waits until the replica is in sync and every sentinel sees the
// master as up, with one replica and two other sentinels.
func (s *Sentinel) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := s.checkReady()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		time.Sleep(sentinelPollInterval)
	}
}

func (s *Sentinel) checkReady() error {
	r, err := s.nodes[1].do(context.Background(), []string{"INFO", "replication"})
	if err != nil {
		return fmt.Errorf("replica %s: %w", s.nodes[1].Addr(), err)
	}
	if info, _ := r[0].(string); !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("replica %s: %s", s.nodes[1].Addr(), firstLine(info, "master_link_status:"))
	}
	for i, n := range s.sentinels {
		r, err := n.do(context.Background(), []string{"SENTINEL", "MASTER", SentinelMasterName})
		if err != nil {
			return fmt.Errorf("sentinel %d (%s): %w", i, n.Addr(), err)
		}
		m, err := pairs(r[0])
		if err != nil {
			return fmt.Errorf("sentinel %d (%s): SENTINEL MASTER: %w", i, n.Addr(), err)
		}
		switch {
		case m["flags"] != "master":
			return fmt.Errorf("sentinel %d (%s): master flags %q", i, n.Addr(), m["flags"])
		case m["num-slaves"] != "1":
			return fmt.Errorf("sentinel %d (%s): knows %s replicas", i, n.Addr(), m["num-slaves"])
		case m["num-other-sentinels"] != strconv.Itoa(sentinels-1):
			return fmt.Errorf("sentinel %d (%s): knows %s other sentinels", i, n.Addr(), m["num-other-sentinels"])
		}
	}
	return nil
}

// pairs turns a flat [name, value, name, value ...] reply into a map.
func pairs(reply any) (map[string]string, error) {
	arr, ok := reply.([]any)
	if !ok || len(arr)%2 != 0 {
		return nil, fmt.Errorf("unexpected reply %v", reply)
	}
	m := make(map[string]string, len(arr)/2)
	for i := 0; i < len(arr); i += 2 {
		k, _ := arr[i].(string)
		v, _ := arr[i+1].(string)
		m[k] = v
	}
	return m, nil
}
