package syncer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

var (
	healthy  = tableport.Limits{Cap: tableport.NoCap, Share: 1000}
	failOpen = tableport.Limits{Cap: tableport.NoCap, Share: 1000, Down: true, Mode: policy.FailOpen}
)

// TestKillAndRestart kills the store (no persistence): Flush fails, the
// syncer turns unhealthy and publishes it (Watch), counts admitted
// meanwhile stay pending in the table; after a restart (empty store) one Flush
// sees the store's new epoch, restores what the instance had pulled before
// the kill (rebuild.go) and pushes every pending count exactly once.
func TestKillAndRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t)
	cfg := testConfig(c, "A")
	r := newRule(t, "api", midGeometry(6), 1000, tableport.NoCap)
	s := startSyncer(t, cfg, r)
	require.Equal(t, syncport.Fleet{Instances: 1, Healthy: true, Changes: 1}, s.fleetView(), "Start reports the store healthy")
	assert.True(t, changed(s), "and signals it")

	admit(t, s, r, "k", 5)
	flush(t, s)
	require.Equal(t, int64(5), total(t, c, r.keyName("k")))
	admit(t, s, r, "k", 3) // pending when the store dies

	srv.Kill()
	err := s.Flush(ctxT(t, 30*time.Second))
	require.Error(t, err)
	assert.False(t, s.isHealthy())
	assert.False(t, s.Stats().Healthy)
	f := s.fleetView()
	require.Equal(t, int64(2), f.Changes, "one change more: the store turned unhealthy")
	assert.False(t, f.Healthy)
	assert.Error(t, f.Err)
	assert.Equal(t, 1, f.Instances)
	assert.True(t, changed(s), "the change is signalled")
	_, err = r.Reserve(ctxT(t, opTimeout), "k", nil, 1)
	assert.ErrorIs(t, err, syncport.ErrUnavailable)

	r.Table.Control().SetLimits(failOpen) // what the limiter does while the store is down
	admit(t, s, r, "k", 4)
	admit(t, s, r, "k2", 2)
	require.Error(t, s.Flush(ctxT(t, 30*time.Second)), "still down")
	assert.Equal(t, int64(2), s.fleetView().Changes, "Fleet changes on changes only")
	assert.False(t, changed(s), "and signals changes only")
	_, own := estimate(t, r.Table, "k", s.Now())
	assert.Equal(t, int64(7), own, "counts stay pending in the table")
	_, own = estimate(t, r.Table, "k2", s.Now())
	assert.Equal(t, int64(2), own)

	srv.Restart()
	r.Table.Control().SetLimits(healthy)
	flush(t, s)
	assert.True(t, s.isHealthy())
	require.Equal(t, syncport.Fleet{Instances: 1, Healthy: true, Changes: 5}, s.fleetView(),
		"three changes more: joining (the cycle back found the restarted store without the instance's entry), healthy again, and no longer joining (its heartbeat registered it, alone)")
	assert.True(t, changed(s), "the change is signalled")
	// The 5 pushed before the kill died with the store's memory and are
	// restored from the instance's view; everything still pending (3 before
	// the kill, 4 during the outage) is pushed once.
	assert.Equal(t, int64(1), s.Stats().Rebuilds, "the loss is seen")
	assert.Equal(t, int64(12), total(t, c, r.keyName("k")))
	assert.Equal(t, int64(2), total(t, c, r.keyName("k2")))
	for _, k := range []string{"k", "k2"} {
		_, own = estimate(t, r.Table, k, s.Now())
		assert.Zero(t, own, "%s acknowledged", k)
	}
	flush(t, s)
	flush(t, s)
	assert.Equal(t, int64(12), total(t, c, r.keyName("k")), "no double counting")
	assert.Equal(t, int64(2), total(t, c, r.keyName("k2")))
	assert.Positive(t, s.Stats().Failures)
	assert.Equal(t, 1, s.instanceCount(), "re-registered")
}

// TestLostReplyWithPersistence loses the reply of a batch the store applied,
// then kills the store (persistent) while the syncer still holds the batch:
// after the restart the batch is resent, recognised, and counted once.
func TestLostReplyWithPersistence(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithPersistence())
	c := srv.Client(t)
	hook := &faultHook{}
	c.AddHook(hook)
	loadScript(t, c) // else the first call gets NOSCRIPT, hidden by the hook
	r := newRule(t, "api", midGeometry(6), 1000, tableport.NoCap)
	s := startSyncer(t, testConfig(c, "A"), r)
	name := r.keyName("k")

	admit(t, s, r, "k", 5)
	flush(t, s)
	require.Equal(t, int64(5), total(t, c, name))

	admit(t, s, r, "k", 3)
	hook.dropReplies.Store(true)
	require.ErrorIs(t, s.Flush(ctxT(t, 30*time.Second)), errLost)
	hook.dropReplies.Store(false)
	assert.False(t, s.isHealthy(), "an ambiguous failure marks the store unhealthy")
	require.Equal(t, int64(8), total(t, c, name), "the store applied the batch whose reply was lost")
	_, own := estimate(t, r.Table, "k", s.Now())
	assert.Equal(t, int64(3), own, "unacknowledged: still pending")

	srv.Kill()
	r.Table.Control().SetLimits(failOpen)
	admit(t, s, r, "k", 4)
	require.Error(t, s.Flush(ctxT(t, 30*time.Second)))
	srv.Restart()
	r.Table.Control().SetLimits(healthy)
	require.Equal(t, int64(8), total(t, c, name), "kept across the restart")

	flush(t, s)
	assert.Equal(t, int64(12), total(t, c, name), "the lost batch is not counted twice")
	assert.Positive(t, s.Stats().Retried)
	est, own := estimate(t, r.Table, "k", s.Now())
	assert.Equal(t, 12.0, est)
	assert.Zero(t, own)
	flush(t, s)
	assert.Equal(t, int64(12), total(t, c, name))
}

// TestLostReplyTwice loses the replies of two calls in a row for one key:
// both batches are resent and recognised.
func TestLostReplyTwice(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			c := redistest.Start(t).Client(t)
			hook := &faultHook{}
			c.AddHook(hook)
			loadScript(t, c) // else the first call gets NOSCRIPT, hidden by the hook
			r := newRule(t, "api", midGeometry(6), 1000, tableport.NoCap)
			cfg := testConfig(c, "A")
			cfg.perKey = path.perKey
			s := startSyncer(t, cfg, r)
			name := r.keyName("k")

			hook.dropReplies.Store(true)
			admit(t, s, r, "k", 2)
			require.Error(t, s.Flush(ctxT(t, 30*time.Second)))
			require.Equal(t, int64(2), total(t, c, name), "applied, reply lost")
			admit(t, s, r, "k", 3)
			require.Error(t, s.Flush(ctxT(t, 30*time.Second)))
			if path.perKey {
				// The resend travels with a new batch in one call.
				require.Equal(t, int64(5), total(t, c, name), "both applied")
			} else {
				// The unanswered bulk call is resent alone, recognised,
				// and its reply lost again: nothing new is pushed before
				// it is answered.
				require.Equal(t, int64(2), total(t, c, name), "resend skipped, nothing new pushed")
			}
			_, own := estimate(t, r.Table, "k", s.Now())
			assert.Equal(t, int64(5), own, "nothing acknowledged yet")
			hook.dropReplies.Store(false)
			admit(t, s, r, "k", 1)
			flush(t, s)
			assert.Equal(t, int64(6), total(t, c, name))
			_, own = estimate(t, r.Table, "k", s.Now())
			assert.Zero(t, own)
			assert.Positive(t, s.Stats().Retried)
		})
	}
}

// TestLostReservationReply loses the reply of a call that carried a
// reservation the store admitted: the caller got syncport.ErrUnavailable and counted
// the admission locally (its fallback), so the syncer must undo the store's
// admission once it learns of it.
func TestLostReservationReply(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cases := []struct {
		name string
		lost int // calls in a row whose reply is lost
	}{
		{"reply lost once", 1},
		{"replies lost twice", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := srv.Client(t) // own client: the hook is per client
			hook := &faultHook{}
			c.AddHook(hook)
			loadScript(t, c)
			r := newRule(t, "strict", midGeometry(5), 100, 0)
			cfg := testConfig(c, "A")
			cfg.Prefix = "lost" + tc.name
			s := startSyncer(t, cfg, r)
			name := r.keyName("k")

			ref := overCap(t, s, r, "k")
			hook.dropReplies.Store(true)
			_, err := r.Reserve(ctxT(t, opTimeout), "k", ref, 1)
			require.ErrorIs(t, err, syncport.ErrUnavailable)
			require.Equal(t, int64(1), total(t, c, name), "the store admitted it")
			// The caller's fallback admits and counts it locally.
			v := r.Table.AllowDegraded("k", s.Now(), 1, policy.FailOpen)
			require.Equal(t, verdict.Allowed, v.Status)
			for i := 1; i < tc.lost; i++ {
				require.Error(t, s.Flush(ctxT(t, 30*time.Second)))
			}
			hook.dropReplies.Store(false)
			flush(t, s) // resend: the store's admission is learnt, a correction queued
			flush(t, s) // the correction is pushed
			assert.Equal(t, int64(1), total(t, c, name), "one admission, counted once")
			for j, n := range buckets(t, c, name) {
				assert.GreaterOrEqual(t, n, int64(0), "bucket %d", j)
			}
		})
	}
}

// TestCorrectionBucket loses the reply of an admitted reservation and learns
// of it sub-windows later: the correction must undo the admission in the
// bucket the store counted it in, not leave that bucket at +n and a later
// one at −n (which would make the store's estimate n too low once the
// admission's bucket leaves the window).
func TestCorrectionBucket(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	hook := &faultHook{}
	c.AddHook(hook)
	loadScript(t, c)                            // else the first call gets NOSCRIPT, hidden by the hook
	geo := window.NewSliding(4*time.Second, 20) // 200ms sub-windows
	r := newRule(t, "strict", geo, 100, 0)
	s := startSyncer(t, testConfig(c, "A"), r)
	name := r.keyName("k")

	ref := overCap(t, s, r, "k")
	hook.dropReplies.Store(true)
	_, err := r.Reserve(ctxT(t, opTimeout), "k", ref, 1)
	require.ErrorIs(t, err, syncport.ErrUnavailable)
	hook.dropReplies.Store(false)
	require.Len(t, buckets(t, c, name), 1, "the store admitted it")
	// The fallback counts it locally; its count is pushed like any other.
	now := s.Now()
	require.Equal(t, verdict.Allowed, r.Table.AllowDegraded("k", now, 1, policy.FailOpen).Status)

	time.Sleep(3 * time.Duration(geo.Sub())) // the syncer learns of the admission later
	flush(t, s)
	flush(t, s)
	got := buckets(t, c, name)
	nonzero := map[int64]int64{}
	for j, n := range got {
		assert.GreaterOrEqual(t, n, int64(0), "bucket %d of %v", j, got)
		if n != 0 {
			nonzero[j] = n
		}
	}
	assert.Equal(t, map[int64]int64{geo.Index(now): 1}, nonzero,
		"only the fallback's count is left, in its bucket: the admission is undone in its own")
	assert.Equal(t, int64(1), s.Stats().Corrections)
}

// TestNoScriptLoadFails gets NOSCRIPT for a call carrying a reservation and
// then fails to load the script: the caller gets syncport.ErrUnavailable and counts the
// admission by its fallback, so the store must never decide that reservation
// afterwards.
func TestNoScriptLoadFails(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	hook := &faultHook{}
	c.AddHook(hook)
	loadScript(t, c) // else the first call gets NOSCRIPT, hidden by the hook
	r := newRule(t, "strict", midGeometry(5), 100, 0)
	s := startSyncer(t, testConfig(c, "A"), r)
	name := r.keyName("k")

	ref := overCap(t, s, r, "k")
	require.NoError(t, c.ScriptFlush(ctxT(t, opTimeout)).Err())
	hook.failLoad.Store(true)
	_, err := r.Reserve(ctxT(t, opTimeout), "k", ref, 1)
	require.ErrorIs(t, err, syncport.ErrUnavailable)
	assert.True(t, s.isHealthy(), "NOSCRIPT is an answer, not an outage")
	require.Zero(t, total(t, c, name), "nothing executed")
	require.Equal(t, verdict.Allowed, r.Table.AllowDegraded("k", s.Now(), 1, policy.FailOpen).Status)

	hook.failLoad.Store(false)
	flush(t, s)
	flush(t, s)
	assert.Equal(t, int64(1), total(t, c, name), "only the fallback's count: the store never decided the reservation")
}

// settleSpy is a rule's keys that records, at each Settle (a push has been
// answered), whether the instance is in the registry.
type settleSpy struct {
	syncport.Keys
	c          redis.UniversalClient
	id         string
	armed      atomic.Bool
	registered atomic.Int32 // Settles while registered, once armed
	settles    atomic.Int32 // Settles once armed
}

func (k *settleSpy) Settle(h handle, now int64, acked []window.Bucket, first int64, totals []int64, lease window.Bucket) []window.Bucket {
	if k.armed.Load() && len(acked) > 0 {
		k.settles.Add(1)
		if err := k.c.ZScore(context.Background(), "t:instances", k.id).Err(); err == nil {
			k.registered.Add(1)
		}
	}
	return k.Keys.Settle(h, now, acked, first, totals, lease)
}

// TestBackRegistersAfterPush: back from an outage, the syncer heartbeats only
// once its first cycle has pushed what was admitted meanwhile, so that an
// instance that saw the store first, which waits for every instance's
// heartbeat since, never goes on before those counts are in the store.
func TestBackRegistersAfterPush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t) // a restart comes back empty: no registry entry
	c := srv.Client(t)
	r := newRule(t, "api", midGeometry(6), 1000, tableport.NoCap)
	spy := &settleSpy{Keys: r.Table.SyncKeys(), c: c, id: "A"}
	r.cfg.Keys = spy
	s := startSyncer(t, testConfig(c, "A"), r)

	srv.Kill()
	require.Error(t, s.Flush(ctxT(t, 30*time.Second)))
	require.False(t, s.isHealthy())
	r.Table.Control().SetLimits(failOpen)
	admit(t, s, r, "k", 4)
	admit(t, s, r, "k2", 2)

	srv.Restart()
	r.Table.Control().SetLimits(healthy)
	spy.armed.Store(true)
	flush(t, s)
	assert.Equal(t, int32(2), spy.settles.Load(), "both keys pushed")
	assert.Zero(t, spy.registered.Load(), "not registered while the outage counts were pushed")
	assert.NoError(t, c.ZScore(ctxT(t, opTimeout), "t:instances", "A").Err(), "registered at the end of the cycle")
	assert.Equal(t, int64(4), total(t, c, r.keyName("k")))
	assert.True(t, s.isHealthy())
}

// TestBackPushesParkedKeys: the first cycle back from an outage pushes the
// counts of keys far from their limit too, which a cycle otherwise leaves
// parked (Keys.Need), both those admitted during the outage and those left
// pending before it, and only then heartbeats: an instance that waits for
// every heartbeat since it saw the store again must find them counted.
func TestBackPushesParkedKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithPersistence())
	c := srv.Client(t)
	r := newRule(t, "api", midGeometry(4), 1000, 4)
	r.cfg.Leases = true
	spy := &settleSpy{Keys: r.Table.SyncKeys(), c: c, id: "A"}
	r.cfg.Keys = spy
	s := cyclingSyncer(t, c, r)
	limits := tableport.Limits{Cap: 4, Share: 1000, Mode: policy.FailLocal}
	r.Table.Control().SetLimits(limits)
	admit(t, s, r, "before", 1)
	admit(t, s, r, "during", 1)
	require.NoError(t, s.cycle())
	require.Zero(t, total(t, c, r.keyName("before")), "parked before the outage")

	srv.Kill()
	require.Error(t, s.cycle())
	require.False(t, s.isHealthy())
	down := limits
	down.Down = true
	r.Table.Control().SetLimits(down)
	admit(t, s, r, "during", 2)

	srv.Restart()
	require.NoError(t, c.Del(ctxT(t, opTimeout), "t:instances").Err(), "as after an outage past InstanceTTL")
	r.Table.Control().SetLimits(limits)
	spy.armed.Store(true)
	require.NoError(t, s.cycle())
	assert.Equal(t, int64(1), total(t, c, r.keyName("before")), "pending since before the outage")
	assert.Equal(t, int64(3), total(t, c, r.keyName("during")), "admitted in the outage")
	assert.Equal(t, int32(2), spy.settles.Load(), "both keys pushed")
	assert.Zero(t, spy.registered.Load(), "not registered while they were pushed")
	assert.NoError(t, c.ZScore(ctxT(t, opTimeout), "t:instances", "A").Err(), "registered at the end of the cycle")
	assert.True(t, s.isHealthy())
}
