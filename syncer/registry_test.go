package syncer

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/localcache"
)

// TestHeartbeatDuringLongCycle gives instance A so many dirty keys (a key
// flood) that one sync cycle lasts longer than the registry's InstanceTTL,
// while instance B watches N̂. A must keep heartbeating during the cycle:
// otherwise its registry entry expires, B counts one instance instead of
// two, and B's divergence cap (ε·L/(N̂+1)) grows past what the error budget
// allows while A is still admitting. Not parallel: it sizes the long cycle
// by a cycle it times first, which the package's parallel tests (several at
// once in the -short lane, TestMain) would slow by a varying amount.
func TestHeartbeatDuringLongCycle(t *testing.T) {
	c := redistest.Start(t).Client(t)
	const ttl = time.Second
	geo := midGeometry(6)
	tab, err := localcache.New(localcache.Config{Geometry: geo, Limit: 1000, Eventual: true, Keys: localcache.NewKeys(1 << 20)})
	require.NoError(t, err)
	tab.SetLimits(localcache.Limits{Cap: localcache.NoCap, Share: 1000})
	ra := &testRule{Table: tab, cfg: syncport.RuleConfig{Name: "api", Geometry: geo, Limit: 1000, Keys: tab.SyncKeys()}}
	cfgA := testConfig(c, "A") // cycles only on Flush
	cfgA.InstanceTTL = ttl
	a := startSyncer(t, cfgA, ra)
	cfgB := testConfig(c, "B")
	cfgB.Interval = 20 * time.Millisecond
	cfgB.InstanceTTL = ttl
	b := startSyncer(t, cfgB, newRule(t, "api", geo, 1000, localcache.NoCap))
	require.Eventually(t, func() bool { return b.instanceCount() == 2 }, 5*time.Second, 5*time.Millisecond)

	admitKeys := func(from, to int) {
		for i := from; i < to; i++ {
			v := tab.AllowAt("k"+strconv.Itoa(i), a.Now(), 1)
			require.Equal(t, localcache.Allowed, v.Status)
		}
	}
	// Measure A's sync rate on this machine, then give it a cycle of about
	// four registry TTLs.
	const probe = 5000
	admitKeys(0, probe)
	began := time.Now()
	flush(t, a)
	rate := float64(probe) / time.Since(began).Seconds()
	n := probe + min(int(rate*4*ttl.Seconds()), 500_000)
	admitKeys(probe, n)
	// A, cycling only on Flush, has not heartbeated since the probe: let its
	// entry expire, so that the N̂ of 2 the watch below waits for is the
	// long cycle's first heartbeat and not the probe's entry about to expire
	// (which B could see lapse just before that heartbeat). Then watch B's N̂
	// from the moment that heartbeat has put A back.
	require.Eventually(t, func() bool { return b.instanceCount() == 1 }, 10*ttl, 5*time.Millisecond,
		"A's registry entry expires while A does not cycle")
	var low atomic.Int64
	low.Store(2)
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		back := false
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			n := int64(b.instanceCount())
			back = back || n == 2
			if back && n < low.Load() {
				low.Store(n)
			}
		}
	}()
	flush(t, a)
	close(done)
	<-watched
	cycle := a.Stats().LastCycle
	require.Greater(t, cycle, 3*ttl/2, "the cycle must outlast the registry entry for this test to mean anything")
	assert.Equal(t, int64(2), low.Load(), "B saw A leave the registry during A's %v cycle", cycle)
	t.Logf("A's cycle of %d keys took %v; B's lowest N̂ %d", a.Stats().LastCycleKeys, cycle.Round(time.Millisecond), low.Load())
}
