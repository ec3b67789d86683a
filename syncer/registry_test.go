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
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
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
	const keys = 1 << 20 // the table's capacity, which the tries' keys share
	geo := midGeometry(6)
	tab, err := localcache.New(localcache.Config{Geometry: geo, Limit: 1000, Eventual: true, Keys: localcache.NewKeys(keys)})
	require.NoError(t, err)
	tab.Control().SetLimits(tableport.Limits{Cap: tableport.NoCap, Share: 1000})
	ra := &testRule{Table: tab, cfg: syncport.RuleConfig{Name: "api", Geometry: geo, Limit: 1000, Keys: tab.SyncKeys()}}
	cfgA := testConfig(c, "A") // cycles only on Flush
	cfgA.InstanceTTL = ttl
	a := startSyncer(t, cfgA, ra)
	cfgB := testConfig(c, "B")
	cfgB.Interval = 20 * time.Millisecond
	cfgB.InstanceTTL = ttl
	b := startSyncer(t, cfgB, newRule(t, "api", geo, 1000, tableport.NoCap))
	require.Eventually(t, func() bool { return b.instanceCount() == 2 }, 5*time.Second, 5*time.Millisecond)

	admitKeys := func(from, to int) {
		for i := from; i < to; i++ {
			v := tab.AllowAt("k"+strconv.Itoa(i), a.Now(), 1)
			require.Equal(t, verdict.Allowed, v.Status)
		}
	}
	// Measure A's sync rate on this machine, then give it a cycle of about
	// four registry TTLs (-short: 2.5). A machine whose load changed since (the cycle
	// ran faster than the probe) gets another try, sized by that cycle.
	const probe = 5000
	admitKeys(0, probe)
	began := time.Now()
	flush(t, a)
	rate := float64(probe) / time.Since(began).Seconds()
	ttls := 4.0
	if testing.Short() {
		// A cycle of 2.5 TTLs still outlasts the entry; one that falls
		// short of 1.5 gets another try.
		ttls = 2.5
	}
	for next, try := probe, 0; ; try++ {
		n := min(int(rate*ttls*ttl.Seconds()), 500_000, keys*9/10-next)
		admitKeys(next, next+n)
		next += n
		low := watchLongCycle(t, a, b, ttl)
		cycle := a.Stats().LastCycle
		if cycle <= 3*ttl/2 {
			require.Less(t, try, 2, "three cycles too short to outlast the registry entry (the last %v)", cycle)
			rate = float64(a.Stats().LastCycleKeys) / cycle.Seconds()
			continue
		}
		assert.Equal(t, int64(2), low, "B saw A leave the registry during A's %v cycle", cycle)
		t.Logf("A's cycle of %d keys took %v; B's lowest N̂ %d", a.Stats().LastCycleKeys, cycle.Round(time.Millisecond), low)
		return
	}
}

// watchLongCycle lets A's registry entry expire (A cycles only on Flush),
// then runs A's cycle with Flush while it watches B's N̂, and returns the
// lowest N̂ B saw once A's first heartbeat of the cycle had put it back.
// Waiting for the expiry first means the N̂ of 2 the watch waits for is
// that heartbeat's and not the previous entry about to expire (which B
// could see lapse just before that heartbeat).
func watchLongCycle(t *testing.T, a, b *Syncer, ttl time.Duration) int64 {
	t.Helper()
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
	return low.Load()
}
