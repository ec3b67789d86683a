package syncer

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	ok := testConfig(c, "a")
	geo := midGeometry(4)
	tab := newTable(t, geo, 10, 0)
	rule := syncport.RuleConfig{Name: "api", Geometry: geo, Limit: 10, Keys: tab.SyncKeys()}
	noKeys := rule
	noKeys.Keys = nil
	other := rule
	other.Keys = newTable(t, geo, 10, 0).SyncKeys()
	cases := []struct {
		name  string
		edit  func(*Config)
		rules []syncport.RuleConfig
	}{
		{"no client", func(c *Config) { c.Client = nil }, nil},
		{"no prefix", func(c *Config) { c.Prefix = "" }, nil},
		{"no instance", func(c *Config) { c.InstanceID = "" }, nil},
		{"zero interval", func(c *Config) { c.Interval = 0 }, nil},
		{"negative timeout", func(c *Config) { c.Timeout = -1 }, nil},
		{"rule without keys", func(*Config) {}, []syncport.RuleConfig{noKeys}},
		{"duplicate rule name", func(*Config) {}, []syncport.RuleConfig{rule, other}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.edit(&cfg)
			_, err := New(cfg, tc.rules...)
			assert.Error(t, err)
		})
	}
	// A nil Clock is valid: the system clock.
	require.Nil(t, ok.Clock)
	s, err := New(ok, rule)
	require.NoError(t, err)
	require.NotNil(t, s.rule("api"))
	assert.Equal(t, max(time.Second, 2*ok.Interval), s.cfg.OpTimeout)
	assert.Equal(t, 256, s.cfg.Batch)
	assert.Equal(t, max(3*time.Second, 10*ok.Interval), s.cfg.InstanceTTL)
	assert.ErrorIs(t, s.Flush(context.Background()), syncport.ErrClosed, "Flush before Start")
	require.NoError(t, s.Close(context.Background()), "Close of a syncer never started")
	_ = s.Start(ctxT(t, opTimeout))
	assert.False(t, s.running.Load(), "Start after Close must not run the loop")
	assert.ErrorIs(t, s.Flush(context.Background()), syncport.ErrClosed)
}

// TestFlushPushesAndPulls admits on real tables, flushes and checks the
// store's totals, the fields of the key, the table's view and the counters.
func TestFlushPushesAndPulls(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	// Load the script first: otherwise whichever subtest syncs first gets
	// NOSCRIPT and one more round trip.
	loadScript(t, c)
	cases := []struct {
		name string
		geo  window.Sliding
	}{
		{"sliding B=6", midGeometry(6)},
		{"sliding B=1", midGeometry(1)},
		{"fixed", midGeometry(0)},
	}
	for i, tc := range cases {
		for pi, path := range paths {
			t.Run(tc.name+"/"+path.name, func(t *testing.T) {
				t.Parallel()
				id := strconv.Itoa(2*i + pi)
				r := newRule(t, "rule"+id, tc.geo, 1000, tableport.NoCap)
				cfg := testConfig(c, "inst-"+id)
				cfg.perKey = path.perKey
				cfg.Prefix = "p" + id // own registry
				s := startSyncer(t, cfg, r)
				st := s.Stats()
				assert.Equal(t, int64(1), st.RoundTrips, "Start: one heartbeat")
				assert.Equal(t, int64(1), st.Commands)
				assert.True(t, st.Healthy)
				assert.Equal(t, 1, s.fleetView().Instances)
				assert.Less(t, st.Offset.Abs(), time.Second, "same host: tiny offset")

				keys := map[string]int{"a": 5, "b:{x}": 1, "c d": 17}
				for k, n := range keys {
					admit(t, s, r, k, n)
				}
				flush(t, s)
				now := s.Now()
				for k, n := range keys {
					name := r.keyName(k)
					assert.Equal(t, int64(n), total(t, c, name), "store total of %q", k)
					bs := buckets(t, c, name)
					assert.Equal(t, map[int64]int64{tc.geo.Index(now): int64(n)}, bs, "one bucket: the current one")
					h := hash(t, c, name)
					if path.perKey {
						seq, err := strconv.ParseInt(h["i:"+cfg.InstanceID], 10, 64)
						require.NoError(t, err)
						assert.InDelta(t, now/1000, seq, 1e7, "sequence numbers are store µs")
						assert.Len(t, h, 2, "one bucket, the sequence number, no reservation record: %v", h)
					} else {
						assert.Len(t, h, 1, "one bucket: the bulk path keeps its sequence number in the marker: %v", h)
					}
					est, own := estimate(t, r.Table, k, now)
					assert.Equal(t, float64(n), est, "table view of %q", k)
					assert.Zero(t, own, "acknowledged counts leave pend")
					pttl, err := c.PTTL(ctxT(t, opTimeout), name).Result()
					require.NoError(t, err)
					assert.Greater(t, pttl, tc.geo.Window(), "the key lives at least a window")
				}
				st = s.Stats()
				assert.Equal(t, int64(1), st.Cycles)
				assert.Equal(t, int64(3), st.KeySyncs)
				assert.Equal(t, int64(3), st.LastCycleKeys)
				assert.Equal(t, int64(3), st.RoundTrips, "Start + heartbeat + one pipeline")
				if path.perKey {
					assert.Equal(t, int64(5), st.Commands, "2 heartbeats + 3 script calls")
				} else {
					assert.Equal(t, int64(7), st.Commands, "2 heartbeats + 1 bulk call + 3 HGETALLs + the epoch's GET")
					seq, err := c.Get(ctxT(t, opTimeout), s.markers[0]).Int64()
					require.NoError(t, err)
					assert.InDelta(t, now/1000, seq, 1e7, "the marker holds the last bulk call's number, in store µs")
				}
				assert.Zero(t, st.Failures)
				assert.Zero(t, st.Reservations)
				assert.Zero(t, st.Corrections)
				assert.Zero(t, st.Retried)
				assert.Zero(t, st.UrgentCycles)
				assert.Positive(t, st.LastCycle)
				assert.Equal(t, int64(1), st.Instances)

				// The next cycle pulls the keys pushed in the last one once more
				// (the follow-up pull), the one after does nothing.
				flush(t, s)
				st = s.Stats()
				assert.Equal(t, int64(6), st.KeySyncs)
				assert.Equal(t, int64(3), st.LastCycleKeys)
				flush(t, s)
				st = s.Stats()
				assert.Equal(t, int64(6), st.KeySyncs)
				assert.Zero(t, st.LastCycleKeys)
				assert.Equal(t, int64(3), st.Cycles)
				for k, n := range keys {
					assert.Equal(t, int64(n), total(t, c, r.keyName(k)), "no double counting of %q", k)
				}

				// More traffic is added on top.
				admit(t, s, r, "a", 2)
				flush(t, s)
				assert.Equal(t, int64(keys["a"]+2), total(t, c, r.keyName("a")))
			})
		}
	}
}

// TestTwoInstancesConverge runs two syncers (other instance, other table) on
// one store: each sees the other's counts, and after the follow-up pull both
// tables hold the same estimate.
func TestTwoInstancesConverge(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	cases := []struct {
		name string
		geo  window.Sliding
	}{
		{"sliding", midGeometry(10)},
		{"fixed", midGeometry(0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prefix := "conv-" + tc.name
			ra := newRule(t, "api", tc.geo, 1000, tableport.NoCap)
			rb := newRule(t, "api", tc.geo, 1000, tableport.NoCap)
			cfgA, cfgB := testConfig(c, "A"), testConfig(c, "B")
			cfgA.Prefix, cfgB.Prefix = prefix, prefix
			a := startSyncer(t, cfgA, ra)
			b := startSyncer(t, cfgB, rb)
			require.Equal(t, ra.keyName("k"), rb.keyName("k"))
			name := ra.keyName("k")

			admit(t, a, ra, "k", 5)
			admit(t, b, rb, "k", 7)
			admit(t, b, rb, "only-b", 3)

			flush(t, a)
			assert.Equal(t, int64(5), total(t, c, name))
			est, _ := estimate(t, ra.Table, "k", a.Now())
			assert.Equal(t, 5.0, est)

			flush(t, b)
			assert.Equal(t, int64(12), total(t, c, name))
			est, own := estimate(t, rb.Table, "k", b.Now())
			assert.Equal(t, 12.0, est, "B sees A's counts after its own flush")
			assert.Zero(t, own)
			assert.Equal(t, 2, b.instanceCount())

			flush(t, a) // follow-up pull
			flush(t, b)
			now := a.Now()
			ea, _ := estimate(t, ra.Table, "k", now)
			eb, _ := estimate(t, rb.Table, "k", now)
			assert.Equal(t, 12.0, ea)
			assert.Equal(t, ea, eb, "both instances converge")
			assert.Equal(t, 2, a.instanceCount())
			_, _, ok := ra.Table.Control().Estimate("only-b", now)
			assert.False(t, ok, "A never pulls a key it does not track")
			assert.Equal(t, int64(12), total(t, c, name), "pulls count nothing")

			// Closing B removes it from the registry: A's next heartbeat
			// sees one instance.
			require.NoError(t, b.Close(ctxT(t, opTimeout)))
			require.NoError(t, b.Close(ctxT(t, opTimeout)), "Close is idempotent")
			assert.ErrorIs(t, b.Flush(ctxT(t, opTimeout)), syncport.ErrClosed)
			flush(t, a)
			assert.Equal(t, 1, a.instanceCount())
		})
	}
}

// TestConcurrentAdmissionsWhileSyncing admits from many goroutines while the
// loop syncs every few milliseconds and Flush runs concurrently: nothing is
// lost and nothing counted twice.
func TestConcurrentAdmissionsWhileSyncing(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	geo := midGeometry(4)
	ra := newRule(t, "hot", geo, 1<<30, tableport.NoCap)
	rb := newRule(t, "hot", geo, 1<<30, tableport.NoCap)
	cfgA, cfgB := testConfig(c, "A"), testConfig(c, "B")
	cfgA.Interval, cfgB.Interval = 3*time.Millisecond, 5*time.Millisecond
	cfgA.Batch = 2 // several pipelines per cycle
	a := startSyncer(t, cfgA, ra)
	b := startSyncer(t, cfgB, rb)

	keys := []string{"k0", "k1", "k2", "k3", "k4"}
	var admitted, byA [5]atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		s, r := a, ra
		if g%2 == 1 {
			s, r = b, rb
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 400; i++ {
				ki := (g + i) % len(keys)
				if v := r.Table.AllowAt(keys[ki], s.Now(), 1); v.Status == verdict.Allowed {
					admitted[ki].Add(1)
					if s == a {
						byA[ki].Add(1)
					}
				}
				if i%100 == 0 {
					_ = s.Flush(context.Background())
				}
			}
		}()
	}
	wg.Wait()
	flush(t, a)
	flush(t, b)
	now := a.Now()
	for i, k := range keys {
		n := admitted[i].Load()
		assert.Equal(t, int64(8*400/len(keys)), n, "limit never binds")
		assert.Equal(t, n, total(t, c, ra.keyName(k)), "store total of %s", k)
		// Each table has its own counts acknowledged. It may lack what
		// the other pushed after its own follow-up pull of the key: the
		// loops run at different intervals here, so convergence is only
		// checked in TestTwoInstancesConverge, where only Flush syncs.
		ea, owna := estimate(t, ra.Table, k, now)
		eb, ownb := estimate(t, rb.Table, k, now)
		assert.Zero(t, owna+ownb, "everything acknowledged")
		assert.GreaterOrEqual(t, ea, float64(byA[i].Load()))
		assert.LessOrEqual(t, ea, float64(n))
		assert.GreaterOrEqual(t, eb, float64(n-byA[i].Load()))
		assert.LessOrEqual(t, eb, float64(n))
	}
	assert.Zero(t, a.Stats().Failures+b.Stats().Failures)
	assert.Greater(t, a.Stats().Cycles, int64(2), "the loop ran on its own")
}

// TestNoScriptReload flushes the server's script cache: the next Flush gets
// NOSCRIPT, loads the script and resends, without a failure or double count.
func TestNoScriptReload(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	r := newRule(t, "api", midGeometry(5), 100, 0) // Cap 0: every check goes to the store
	s := startSyncer(t, testConfig(c, "A"), r)
	r.Table.Control().SetLimits(tableport.Limits{Cap: tableport.NoCap, Share: 100})
	admit(t, s, r, "k", 3)
	flush(t, s)
	require.Equal(t, int64(3), total(t, c, r.keyName("k")))

	require.NoError(t, c.ScriptFlush(ctxT(t, opTimeout)).Err())
	admit(t, s, r, "k", 4)
	flush(t, s)
	assert.Equal(t, int64(7), total(t, c, r.keyName("k")))

	// A reservation whose first send gets NOSCRIPT is decided once, by the
	// resend after the load.
	r.Table.Control().SetLimits(tableport.Limits{Cap: 0, Share: 100})
	require.NoError(t, c.ScriptFlush(ctxT(t, opTimeout)).Err())
	v := r.Table.AllowAt("k", s.Now(), 2)
	require.Equal(t, verdict.OverCap, v.Status)
	ref, _ := r.Table.Control().Ref("k")
	res, err := r.Reserve(ctxT(t, opTimeout), "k", ref, 2)
	require.NoError(t, err)
	assert.True(t, res.Admitted)
	assert.Equal(t, int64(100-9), outcomeOf(r, res, 2).Remaining)
	assert.Equal(t, int64(9), total(t, c, r.keyName("k")))
	assert.Zero(t, s.Stats().Failures)
	assert.Zero(t, s.Stats().Retried, "a NOSCRIPT reply is not an ambiguous failure")
	recs := records(t, c, r.keyName("k"), "A")
	require.Len(t, recs, 1)
	for _, rec := range recs {
		assert.True(t, strings.HasPrefix(rec, "1:"), "stored results %q", rec)
	}
}
