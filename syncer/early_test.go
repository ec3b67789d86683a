package syncer

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// busy gives key a history that makes it busy (localcache.Table.busy): as
// far as this instance knows, the fleet admitted 40 % of the limit in the
// bucket before; and publishes the time.
func busy(t *testing.T, s *Syncer, r *testRule, key string) {
	t.Helper()
	now := s.Now()
	r.Table.Control().Tick(now)
	ref, ok := r.Table.Control().Ref(key)
	require.True(t, ok)
	k := r.cfg.Geometry.Index(now)
	r.Table.SyncKeys().Settle(ref, now, nil, k-1, []int64{r.cfg.Limit * 4 / 10, 0}, window.Bucket{})
}

// TestEarlySync: a busy key whose admissions leave it half of its cap or less is
// synced at once in the background, with no check waiting and no sync cycle
// (the interval is an hour): its counts reach the store, are acknowledged
// (the cap is whole again), and, with leases, the store grants it a lease,
// so that the key goes on admitting past its cap without asking the store.
func TestEarlySync(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		leases bool
	}{
		{"with leases (Eventual)", true},
		{"without leases", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := redistest.Start(t).Client(t)
			r := newRule(t, "api", midGeometry(4), 1000, 10)
			r.cfg.Leases = tc.leases
			s := startSyncer(t, testConfig(c, "A"), r)

			busy(t, s, r, "k")
			admit(t, s, r, "k", 5) // the fifth asks
			require.Eventually(t, func() bool {
				_, own := estimate(t, r.Table, "k", s.Now())
				return own == 0
			}, 10*time.Second, time.Millisecond, "the early sync acknowledged the counts")
			st := s.Stats()
			assert.Equal(t, int64(1), st.EarlySyncs)
			assert.Zero(t, st.UrgentCycles, "no check waited")
			assert.Zero(t, st.Cycles, "no sync cycle ran")

			ref, ok := r.Table.Control().Ref("k")
			require.True(t, ok)
			want := r.Table.SyncKeys().Want(ref, s.Now(), 0)
			n := int64(0)
			for r.Table.AllowAt("k", s.Now(), 1).Status == 0 && n < 1000 {
				n++
			}
			if tc.leases {
				// The early sync wanted this instance's part of the bucket
				// before (400, the only instance), held to the most an
				// instance holds unused, ⌊(⌊1000/10⌋ − 1)/2⌋ = 49: the key
				// holds that lease now, and asks for no more until it has
				// used some.
				assert.Zero(t, want)
				assert.GreaterOrEqual(t, n, int64(10+49), "the lease on top of the cap")
			} else {
				assert.Equal(t, int64(20), want, "twice the cap: the sync brought the store's totals, which never saw the 400")
				assert.GreaterOrEqual(t, n, int64(10))
			}
			flush(t, s)
			_, own := estimate(t, r.Table, "k", s.Now())
			assert.Zero(t, own)
		})
	}
}

// TestFlushGrantsNoLease: an early sync a flush serves asks for no lease,
// so that after the flush the store counts exactly what was admitted and
// the key holds no lease.
func TestFlushGrantsNoLease(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	r := newRule(t, "api", midGeometry(4), 1000, 10)
	r.cfg.Leases = true
	s := cyclingSyncer(t, c, r)
	busy(t, s, r, "k")
	admit(t, s, r, "k", 5) // the fifth asks
	s.releaseOver(s.Now(), true)
	flushCycle(t, s)
	assert.Equal(t, int64(1), s.Stats().EarlySyncs, "the flush served the early sync")
	assert.Equal(t, int64(5), total(t, c, r.keyName("k")), "no units leased")
	assert.Empty(t, s.leases)
}

// TestNeedDrivenCycle: a cycle syncs the keys that need it (one near its
// limit, one at its cap) and leaves a key far from both with its counts
// pending, not asked again until an admission queues it; a flush finds and
// syncs every key with pending counts.
func TestNeedDrivenCycle(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	r := newRule(t, "api", midGeometry(4), 1000, 4)
	r.cfg.Leases = true
	s := cyclingSyncer(t, c, r)
	now := s.Now()
	r.Table.Control().Tick(now)
	near, ok := r.Table.Control().Ref("near")
	require.True(t, ok)
	r.Table.SyncKeys().Settle(near, now, nil, r.cfg.Geometry.Index(now)-1, []int64{500, 0}, window.Bucket{})

	// Synced once, with no history: a key new here would ask for an early
	// sync at half of its cap (localcache's TestEarlyNewKeys).
	capped, ok := r.Table.Control().Ref("capped")
	require.True(t, ok)
	r.Table.SyncKeys().Settle(capped, now, nil, r.cfg.Geometry.Index(now)-1, []int64{0, 0}, window.Bucket{})

	admit(t, s, r, "quiet", 1)
	admit(t, s, r, "near", 1)
	admit(t, s, r, "capped", 2)
	r.Table.Control().SetLimits(tableport.Limits{Cap: 2, Share: 1000, Mode: policy.FailLocal})
	require.NoError(t, s.cycle())
	assert.Zero(t, total(t, c, r.keyName("quiet")), "deferred")
	assert.Equal(t, int64(1), total(t, c, r.keyName("near")), "half of the limit in view")
	assert.Equal(t, int64(2), total(t, c, r.keyName("capped")), "at its cap")
	assert.Equal(t, int64(1), s.Stats().Deferred)
	assert.Zero(t, s.Stats().EarlySyncs)

	require.NoError(t, s.cycle())
	assert.Zero(t, total(t, c, r.keyName("quiet")), "still pending: no admission queued it again")
	assert.Equal(t, int64(1), s.Stats().Deferred, "not asked again")

	flushCycle(t, s)
	assert.Equal(t, int64(1), total(t, c, r.keyName("quiet")), "a flush finds and syncs every pending key")
	_, own := estimate(t, r.Table, "quiet", s.Now())
	assert.Zero(t, own)
}

// spendNewAsks uses up r's early asks of new keys for the current
// sub-window (localcache's TestEarlyNewKeys): new keys admitted half units
// each, half of their cap, ask until the budget is spent; their asks are
// taken off the list, never served (the keys are queued for the next
// cycle, which parks them again). A key new after it asks only once at its
// cap, as a test of the cycles alone needs.
func spendNewAsks(t *testing.T, s *Syncer, r *testRule, half int) {
	t.Helper()
	for i := 0; ; i++ {
		require.Less(t, i, 100, "the early asks of new keys have a budget")
		admit(t, s, r, "spent"+itoa(int64(i)), half)
		if len(r.Table.SyncKeys().Early(nil)) == 0 {
			return
		}
	}
}

// TestBornParkedKeys: on a table synced by need (an Eventual rule's), a new
// key starts parked: the cycle neither pushes nor looks at its first
// admissions (nothing is deferred: it is on no list); the admission that
// takes it to half of its cap queues it, for a cycle that parks it again
// (Need: not at its cap yet) or, at its cap, syncs it; a flush finds a
// quiet one.
func TestBornParkedKeys(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	geo := midGeometry(4)
	tab, err := localcache.New(localcache.Config{Geometry: geo, Limit: 1000, Eventual: true, ByNeed: true, Keys: localcache.NewKeys(1000)})
	require.NoError(t, err)
	tab.Control().SetLimits(tableport.Limits{Cap: 4, Share: 1000, Mode: policy.FailLocal})
	r := &testRule{Table: tab, cfg: syncport.RuleConfig{Name: "api", Geometry: geo, Limit: 1000, Keys: tab.SyncKeys(), Leases: true}}
	s := cyclingSyncer(t, c, r)
	r.Table.Control().Tick(s.Now())
	spendNewAsks(t, s, r, 2)
	require.NoError(t, s.cycle()) // the spent keys, at half of their cap, are parked again
	d0 := s.Stats().Deferred

	admit(t, s, r, "quiet", 1)
	admit(t, s, r, "busy", 1)
	require.NoError(t, s.cycle())
	assert.Zero(t, total(t, c, r.keyName("quiet")))
	assert.Zero(t, total(t, c, r.keyName("busy")))
	assert.Equal(t, d0, s.Stats().Deferred, "born parked: not even looked at")

	admit(t, s, r, "busy", 1) // 2 of a cap of 4: half of its allowance
	require.NoError(t, s.cycle())
	assert.Zero(t, total(t, c, r.keyName("busy")))
	assert.Equal(t, d0+1, s.Stats().Deferred, "queued at half of its cap, parked again")
	admit(t, s, r, "busy", 2)
	require.NoError(t, s.cycle())
	assert.GreaterOrEqual(t, total(t, c, r.keyName("busy")), int64(4), "at its cap: synced (with a lease, counted too)")
	_, own := estimate(t, r.Table, "busy", s.Now())
	assert.Zero(t, own, "acknowledged")
	assert.Zero(t, total(t, c, r.keyName("quiet")))

	flushCycle(t, s)
	assert.Equal(t, int64(1), total(t, c, r.keyName("quiet")), "a flush finds and syncs every pending key")
}

// TestDeferredCorrections: a correction of a key that needs no sync (the
// unused units of an ended lease) waits for a cycle that syncs the key, or
// a flush; one whose bucket has left the window is dropped, as the store
// drops the bucket.
func TestDeferredCorrections(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	r := newRule(t, "api", midGeometry(4), 1000, 4)
	r.cfg.Leases = true
	s := cyclingSyncer(t, c, r)

	admit(t, s, r, "k", 3)
	flushCycle(t, s)
	require.Equal(t, int64(3), total(t, c, r.keyName("k")))
	ref, ok := r.Table.Control().Ref("k")
	require.True(t, ok)
	id := keyID{rule: r.windowRule, key: "k"}
	k := r.cfg.Geometry.Index(s.Now())
	s.correct(id, ref, k, -1)

	require.NoError(t, s.cycle())
	assert.Equal(t, int64(3), total(t, c, r.keyName("k")), "deferred")
	require.NotNil(t, s.state[id], "kept")

	flushCycle(t, s)
	assert.Equal(t, int64(2), total(t, c, r.keyName("k")), "a flush pushes it")
	assert.Nil(t, s.state[id])

	s.correct(id, ref, k-int64(r.cfg.Geometry.Span()), -1) // a bucket out of the window
	require.NoError(t, s.cycle())
	assert.Nil(t, s.state[id], "dropped")
	assert.Equal(t, int64(2), total(t, c, r.keyName("k")))
}

// flushCycle runs one cycle of s as a flush runs it (every key, no lease).
func flushCycle(t *testing.T, s *Syncer) {
	t.Helper()
	s.flushing = true
	defer func() { s.flushing = false }()
	require.NoError(t, s.cycle())
}

// cyclingSyncer returns a syncer of rules that is registered and healthy but
// not started: the test runs its cycles (and owns its loop's state).
func cyclingSyncer(t *testing.T, c redis.UniversalClient, rules ...*testRule) *Syncer {
	t.Helper()
	s, err := newSyncer(testConfig(c, "A"), rules...)
	require.NoError(t, err)
	require.NoError(t, s.heartbeat(ctxT(t, opTimeout)))
	s.setHealth(true, nil)
	return s
}
