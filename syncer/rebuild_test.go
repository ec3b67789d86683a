package syncer

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tableport"
)

// manualSyncer is a syncer whose cycles the test runs (no loop), registered
// as id.
func manualSyncer(t *testing.T, c redis.UniversalClient, id string, perKey bool, rules ...*testRule) *Syncer {
	t.Helper()
	cfg := testConfig(c, id)
	cfg.perKey = perKey
	s, err := newSyncer(cfg, rules...)
	require.NoError(t, err)
	require.NoError(t, s.heartbeat(ctxT(t, opTimeout)))
	s.setHealth(true, nil)
	return s
}

// TestRebuildAfterLoss: two instances have pushed and pulled a key when the
// store loses everything (FLUSHALL). The first to see the new epoch, at its
// heartbeat or from a call that ran nothing, restores the key from its view
// and pushes what it admitted since; the second restores too, and the store
// counts every admission once: the views overlap, the restore keeps the
// largest. Both join the new registry, each sees the loss once and counts
// it as one failure.
func TestRebuildAfterLoss(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		perKey bool
		call   bool // the loss is seen by a call, before any heartbeat
	}{
		{"bulk/heartbeat", false, false},
		{"bulk/call", false, true},
		{"per-key/heartbeat", true, false},
		{"per-key/call", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := redistest.Start(t).Client(t)
			geo := midGeometry(6)
			ra := newRule(t, "api", geo, 1000, tableport.NoCap)
			rb := newRule(t, "api", geo, 1000, tableport.NoCap)
			a := manualSyncer(t, c, "A", tc.perKey, ra)
			b := manualSyncer(t, c, "B", tc.perKey, rb)
			admit(t, a, ra, "k", 5)
			admit(t, b, rb, "k", 3)
			require.NoError(t, a.cycle())
			require.NoError(t, b.cycle())
			require.NoError(t, a.cycle()) // the follow-up pull: both views hold 8
			name := ra.keyName("k")
			require.Equal(t, int64(8), total(t, c, name))
			view := func(r *testRule) float64 {
				est, _ := estimate(t, r.Table, "k", a.Now())
				return est
			}
			require.Equal(t, 8.0, view(ra))
			require.Equal(t, 8.0, view(rb))

			require.NoError(t, c.FlushAll(ctxT(t, opTimeout)).Err())
			admit(t, a, ra, "k", 2)
			if tc.call {
				ref, ok := ra.Table.Control().Ref("k")
				require.True(t, ok)
				err := a.syncKeys(ctxT(t, opTimeout), []item{{id: keyID{rule: ra.windowRule, key: "k"}, ref: ref}})
				require.ErrorIs(t, err, errStoreLost)
				assert.Zero(t, total(t, c, name), "a call of the old epoch runs nothing")
				assert.Equal(t, 10.0, view(ra), "nor is its pull taken: the view still holds 8, and the 2 pending")
				assert.Equal(t, int64(1), a.Stats().Rebuilds)
			}
			require.NoError(t, a.cycle())
			assert.Equal(t, int64(10), total(t, c, name), "restored, and the 2 since pushed")
			assert.Equal(t, 10.0, view(ra))
			require.NoError(t, b.cycle())
			assert.Equal(t, int64(10), total(t, c, name), "B's restore keeps the largest view: nothing twice")
			assert.Equal(t, 10.0, view(rb))
			for _, s := range []*Syncer{a, b} {
				require.NoError(t, s.cycle())
				assert.Equal(t, int64(1), s.Stats().Rebuilds, "one loss seen")
				assert.Equal(t, int64(1), s.Stats().Failures, "and counted as one failure")
				assert.Empty(t, s.lost)
				assert.Equal(t, 2, s.instanceCount())
			}
			assert.Equal(t, int64(10), total(t, c, name))
			n, err := c.ZCard(ctxT(t, opTimeout), "t:instances").Result()
			require.NoError(t, err)
			assert.Equal(t, int64(2), n, "both in the new registry")
			ep, err := c.Get(ctxT(t, opTimeout), epochKey("t")).Result()
			require.NoError(t, err)
			assert.Equal(t, a.epoch, ep)
			assert.Equal(t, b.epoch, ep)
		})
	}
}

// TestRebuildAfterRollback: the store goes back in time, as after a failover
// to a replica that lacked the last writes (simulated: every key dumped,
// then, after more pushes and heartbeats, restored as it was). The epoch
// survives, but the first instance to heartbeat finds its last heartbeat
// gone and starts a partial epoch; each instance then makes up, per bucket,
// what the store lacks of its view (not the whole view: the store kept the
// rest), and the store counts every admission once.
func TestRebuildAfterRollback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		perKey bool
	}{{"bulk", false}, {"per-key", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := redistest.Start(t).Client(t)
			ctx := ctxT(t, opTimeout)
			geo := midGeometry(6)
			ra := newRule(t, "api", geo, 1000, tableport.NoCap)
			rb := newRule(t, "api", geo, 1000, tableport.NoCap)
			a := manualSyncer(t, c, "A", tc.perKey, ra)
			b := manualSyncer(t, c, "B", tc.perKey, rb)
			name := ra.keyName("k")
			sync3 := func() {
				t.Helper()
				require.NoError(t, a.cycle())
				require.NoError(t, b.cycle())
				require.NoError(t, a.cycle())
			}
			admit(t, a, ra, "k", 5)
			admit(t, b, rb, "k", 3)
			sync3()
			require.Equal(t, int64(8), total(t, c, name))

			// The replica's copy: every key as it is now.
			type dumped struct {
				val string
				ttl time.Duration
			}
			snap := map[string]dumped{}
			keys, err := c.Keys(ctx, "*").Result()
			require.NoError(t, err)
			for _, k := range keys {
				v, err := c.Dump(ctx, k).Result()
				require.NoError(t, err)
				ttl, err := c.PTTL(ctx, k).Result()
				require.NoError(t, err)
				snap[k] = dumped{v, max(ttl, 0)}
			}
			require.Contains(t, snap, epochKey("t"))

			time.Sleep(2 * time.Millisecond) // the next heartbeats write later expiries
			admit(t, a, ra, "k", 4)
			admit(t, b, rb, "k", 2)
			sync3()
			require.Equal(t, int64(14), total(t, c, name))

			// The failover: the store as the replica had it.
			require.NoError(t, c.FlushAll(ctx).Err())
			for k, d := range snap {
				require.NoError(t, c.RestoreReplace(ctx, k, d.ttl, d.val).Err())
			}
			require.Equal(t, int64(8), total(t, c, name))

			admit(t, a, ra, "k", 1)
			require.NoError(t, a.cycle())
			assert.Equal(t, int64(15), total(t, c, name), "what the store lacked of A's view made up, and the 1 since pushed")
			require.NoError(t, b.cycle())
			assert.Equal(t, int64(15), total(t, c, name), "B's view holds nothing more")
			for _, s := range []*Syncer{a, b} {
				require.NoError(t, s.cycle())
				assert.Equal(t, int64(1), s.Stats().Rebuilds, "one loss seen")
				assert.True(t, strings.HasPrefix(s.epoch, "p"), "a partial loss: %q", s.epoch)
			}
			assert.Equal(t, int64(15), total(t, c, name))
		})
	}
}

// TestLossHoldsInstances: the registry goes with the store's data; N̂ stays
// at its value before the loss for an InstanceTTL, while the instances
// heartbeat into the new registry, not 1 for the first back.
func TestLossHoldsInstances(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	geo := midGeometry(6)
	ss := make([]*Syncer, 3)
	for i := range ss {
		ss[i] = manualSyncer(t, c, "I"+itoa(int64(i)), false, newRule(t, "api", geo, 1000, tableport.NoCap))
	}
	for _, s := range ss {
		require.NoError(t, s.heartbeat(ctxT(t, opTimeout)))
	}
	require.Equal(t, 3, ss[0].instanceCount())
	require.NoError(t, c.FlushAll(ctxT(t, opTimeout)).Err())
	require.NoError(t, ss[0].cycle())
	assert.Equal(t, 3, ss[0].instanceCount(), "held while the registry refills")
	n, err := c.ZCard(ctxT(t, opTimeout), "t:instances").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the registry holds the one instance back so far")
	ss[0].holdUntil = ss[0].localNow() // the InstanceTTL has passed
	require.NoError(t, ss[0].heartbeat(ctxT(t, opTimeout)))
	assert.Equal(t, 1, ss[0].instanceCount(), "then the registry's count")
}

// TestRegistryEpoch: the registry script starts an epoch when there is
// none (not when removing), keeps it without a TTL, and heartbeats only a
// caller of the store's epoch (or of none yet): one of another only looks.
func TestRegistryEpoch(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	ctx := ctxT(t, opTimeout)
	const reg = "t:instances"
	ek := epochKey("t")
	run := func(id, mode, epoch string) string {
		t.Helper()
		v, err := registryScript.Run(ctx, c, []string{reg, ek}, id, 5000, mode, epoch).Slice()
		require.NoError(t, err)
		require.Len(t, v, 6)
		return v[5].(string)
	}
	registered := func(id string) bool {
		t.Helper()
		err := c.ZScore(ctx, reg, id).Err()
		if err == redis.Nil {
			return false
		}
		require.NoError(t, err)
		return true
	}
	assert.Empty(t, run("a", regRemove, ""), "removing starts no epoch")
	ep := run("a", regBeat, "")
	require.NotEmpty(t, ep)
	assert.True(t, registered("a"))
	ttl, err := c.PTTL(ctx, ek).Result()
	require.NoError(t, err)
	assert.Equal(t, time.Duration(-1), ttl, "the epoch has no TTL")
	assert.Equal(t, ep, run("b", regBeat, ep), "the same epoch")
	assert.True(t, registered("b"))
	assert.Equal(t, ep, run("c", regBeat, "older"), "a caller of another epoch learns this one")
	assert.False(t, registered("c"), "and only looks")
	assert.Equal(t, ep, run("c", regLook, ep))
	assert.False(t, registered("c"))

	require.NoError(t, c.Del(ctx, ek).Err())
	ep2 := run("a", regLook, ep)
	assert.NotEqual(t, ep, ep2, "a lost epoch starts anew, also on a look")
	assert.Equal(t, ep2, run("b", regBeat, ep2))

	assert.Equal(t, "t:epoch{t:instances}", ek, "under the prefix, in the registry's slot")
	_, tag, _ := strings.Cut(ek, "{")
	tag, _, _ = strings.Cut(tag, "}")
	assert.Equal(t, reg, tag, "its hash tag is the registry's whole name: the registry's slot")
}

// TestRestoreScript: a restore raises each bucket's restored part to at
// least the count given (the largest of several restores, never their sum),
// to which what was pushed since adds; on a store that may have kept the
// key (a cluster), only to what the bucket's own field lacks. It skips
// buckets out of the window, and both the sync script and the bulk pull
// count the restored field with the bucket's own.
func TestRestoreScript(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	ctx := ctxT(t, opTimeout)
	now := storeTimeUs(t, c)
	sub := midSubUs(now, 100_000)
	k := now / sub
	const span, key = 4, "t:{api:k}:1"
	// restore gives view pairs, then lease pairs.
	restore := func(whole string, view []int64, leases ...int64) int64 {
		t.Helper()
		args := []any{sub, span, 60_000, whole, len(view) / 2}
		for _, p := range append(view, leases...) {
			args = append(args, p)
		}
		n, err := restoreScript.Run(ctx, c, []string{key}, args...).Int64()
		require.NoError(t, err)
		return n
	}
	assert.Equal(t, int64(2), restore("1", []int64{k, 8, k - 1, 5, k - span, 7}), "the bucket out of the window is skipped")
	assert.Equal(t, int64(1), restore("1", []int64{k, 6, k - 1, 9}), "only a larger count raises")
	require.NoError(t, c.HIncrBy(ctx, key, itoa(k), 2).Err()) // pushed since the loss
	assert.Equal(t, map[int64]int64{k: 10, k - 1: 9}, buckets(t, c, key))
	assert.Zero(t, restore("1", []int64{k, 8}), "the count pushed since is not taken for a restored one")
	assert.Equal(t, map[int64]int64{k: 10, k - 1: 9}, buckets(t, c, key))
	// On a store that may have kept the key, a bucket whose own field holds
	// the view is left as it is; one that lost part of it gets the part
	// back.
	require.NoError(t, c.HSet(ctx, key, itoa(k-2), 7).Err())
	assert.Zero(t, restore("0", []int64{k - 2, 7}))
	assert.Equal(t, int64(1), restore("0", []int64{k - 2, 9}))
	assert.Equal(t, map[int64]int64{k: 10, k - 1: 9, k - 2: 9}, buckets(t, c, key))
	// Each instance's own leases that no view holds add up: the next
	// bucket's, and one past it counted there.
	assert.Equal(t, int64(2), restore("1", nil, k+1, 4, k+3, 1))
	assert.Equal(t, int64(1), restore("1", nil, k+1, 3))
	assert.Equal(t, "8", c.HGet(ctx, key, itoa(k+1)).Val())
	assert.Equal(t, "8", c.HGet(ctx, key, "v"+itoa(k)).Val())

	// The sync script's pull and the bulk path's read them as one bucket
	// (and the next bucket's leases within the current one's total).
	r := runSync(t, c, key, scriptRule{sub: sub, span: span, limit: 100, ttl: 60_000, inst: "A", exact: true})
	require.Equal(t, k-span+1, r.oldest)
	assert.Equal(t, []int64{0, 9, 9, 18}, r.totals)
	cmd := c.HGetAll(ctx, key)
	tot, ok := pulled(cmd, k-span+1, span, nil)
	require.True(t, ok)
	assert.Equal(t, []int64{0, 9, 9, 18}, tot)

	// A bucket that left the window goes with its restored field.
	_, err := c.HSet(ctx, key, "v"+itoa(k-span-1), 4, itoa(k-span-1), 1).Result()
	require.NoError(t, err)
	runSync(t, c, key, scriptRule{sub: sub, span: span, limit: 100, ttl: 60_000, inst: "A", exact: true},
		sbatch{seq: "1", deltas: [][2]int64{{k - 1, 1}}}) // starts bucket k-1's own field: a cleanup
	h := hash(t, c, key)
	assert.NotContains(t, h, "v"+itoa(k-span-1))
	assert.NotContains(t, h, itoa(k-span-1))
	assert.Equal(t, "8", h["v"+itoa(k)])
}

// TestGCRAFloor: a check that gives the TAT the store last told it decides
// on that TAT when the store's is below it or missing (the store lost the
// key), and records from it; a floor the store's TAT is past changes
// nothing. The emission interval is a second: a test that runs slow by less
// than that reads the same debts.
func TestGCRAFloor(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	ctx := ctxT(t, opTimeout)
	const iv, tau = int64(time.Second), 10 * int64(time.Second)
	check := func(key string, floor int64) (admitted, debt int64) {
		t.Helper()
		args := []any{iv, tau, 1, "0", 0}
		if floor != 0 {
			args = append(args, floor/int64(time.Second), floor%int64(time.Second))
		}
		v, err := gcraScript.Run(ctx, c, []string{key}, args...).Int64Slice()
		require.NoError(t, err)
		return v[0], v[3]
	}
	now := storeTimeUs(t, c) * int64(time.Microsecond)
	cases := []struct {
		name     string
		floor    int64
		admitted int64
		lo, hi   int64 // the debt after the check is in (lo, hi]
	}{
		{"no floor", 0, 1, 0, iv},
		{"a floor passed", now - iv, 1, 0, iv},
		{"a lost key", now + 5*iv, 1, 5 * iv, 6 * iv},
		{"a floor past τ", now + tau, 0, tau - iv, tau},
	}
	for i, tc := range cases {
		key := "g" + strconv.Itoa(i)
		adm, d := check(key, tc.floor)
		assert.Equal(t, tc.admitted, adm, tc.name)
		assert.Greater(t, d, tc.lo, tc.name)
		assert.LessOrEqual(t, d, tc.hi, tc.name)
	}
	_, d := check("g2", 0)
	assert.Greater(t, d, 6*iv, "recorded from the floor: the next check without one finds it")
	adm, d := check("g2", now)
	assert.Equal(t, int64(1), adm)
	assert.Greater(t, d, 7*iv, "a floor below the store's TAT changes nothing")
}

// TestGCRACharge: a check that carries a charge (units its failure mode
// admitted while the store did not answer) has the store take them from
// the bucket before it decides, and record them whatever it decides: on an
// admission, on a denial (the debt may pass τ), on a peek. A negative
// charge (admissions taken back) gives units back, never below a full
// bucket. The emission interval is a second, as in TestGCRAFloor.
func TestGCRACharge(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	ctx := ctxT(t, opTimeout)
	const iv, tau = int64(time.Second), 10 * int64(time.Second)
	check := func(key string, n int64, peek string, charge int64) (admitted, debt int64) {
		t.Helper()
		args := []any{iv, tau, n, peek, 0, 0, 0}
		if charge != 0 {
			args = append(args, charge)
		}
		v, err := gcraScript.Run(ctx, c, []string{key}, args...).Int64Slice()
		require.NoError(t, err)
		return v[0], v[3]
	}
	cases := []struct {
		name     string
		n        int64
		peek     string
		charge   int64
		admitted int64
		lo, hi   int64 // the debt after the check is in (lo, hi]
		after    int64 // a peek after it finds a debt above this
	}{
		{"charged, then admitted", 1, "0", 4, 1, 4 * iv, 5 * iv, 4 * iv},
		{"charged past τ: denied, recorded", 1, "0", 12, 0, 11 * iv, 12 * iv, 11 * iv},
		{"a peek records the charge", 1, "1", 3, 1, 2 * iv, 3 * iv, 2 * iv},
		{"a negative charge on a full bucket", 1, "0", -5, 1, 0, iv, 0},
	}
	for i, tc := range cases {
		key := "c" + strconv.Itoa(i)
		adm, d := check(key, tc.n, tc.peek, tc.charge)
		assert.Equal(t, tc.admitted, adm, tc.name)
		assert.Greater(t, d, tc.lo, tc.name)
		assert.LessOrEqual(t, d, tc.hi, tc.name)
		_, again := check(key, 1, "1", 0)
		assert.Greater(t, again, tc.after, "%s: recorded", tc.name)
	}
	// A negative charge gives back what a charge took.
	check("back", 1, "0", 6)
	_, d := check("back", 1, "0", -4)
	assert.LessOrEqual(t, d, 4*iv, "7 taken, 4 given back")
	assert.Greater(t, d, 2*iv)
}
