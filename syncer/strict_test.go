package syncer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/window"
)

// strictGap returns a random real-time pause around the interval iv: mostly
// shorter (keys drain), sometimes none, sometimes long (they refill).
func strictGap(r *rand.Rand, iv time.Duration) time.Duration {
	switch r.IntN(20) {
	case 0:
		return time.Duration(r.Int64N(int64(8 * iv)))
	case 1, 2, 3:
		return 0
	}
	return time.Duration(r.Int64N(int64(iv)))
}

// TestGCRAScriptMatchesReference: on random arrivals and costs over a few
// keys, the store's script decides what window.GCRA decides at the store's
// time of each decision, and leaves the key at the reference's TAT, to the
// nanosecond (also for an interval that is not a whole number of µs).
func TestGCRAScriptMatchesReference(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	for i, tc := range []struct {
		window       time.Duration
		limit, burst int64
	}{
		{time.Second, 1000, 1},
		{time.Second, 1000, 5},
		{time.Second, 3333, 4}, // T = 300.03µs
		{time.Hour, 3_600_000, 2},
	} {
		t.Run(fmt.Sprintf("%v/%d/burst%d", tc.window, tc.limit, tc.burst), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(client, "g")
			cfg.Prefix = "gcra" + strconv.Itoa(i)
			s := startSyncer(t, cfg)
			g := window.NewGCRA(tc.window, tc.limit, tc.burst)
			r, err := s.addGCRA("g", g.Interval(), g.Burst(), g.Burst())
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(7, uint64(i)))
			tats := map[string]int64{}
			var allowed, denied int
			ctx := ctxT(t, opTimeout)
			for step := 0; step < referenceSteps(); step++ {
				time.Sleep(strictGap(rng, time.Duration(g.Interval())))
				key := "k" + strconv.Itoa(rng.IntN(2))
				n := 1 + rng.Int64N(min(g.Burst(), 3))
				peek := rng.IntN(10) == 0
				a, err := r.Decide(ctx, key, n, peek)
				require.NoError(t, err)
				at := fmt.Sprintf("step %d key %s n %d peek %v at %d", step, key, n, peek, a.At)
				tat := tats[key]
				if peek {
					_, ok := g.Admit(tat, a.At, 1)
					require.Equal(t, ok, a.Admitted, at)
					require.Equal(t, max(tat, a.At), a.TAT, at)
					continue
				}
				next, ok := g.Admit(tat, a.At, n)
				require.Equal(t, ok, a.Admitted, at)
				if ok {
					tats[key] = next
					allowed++
				} else {
					denied++
				}
				require.Equal(t, max(tats[key], a.At), a.TAT, at)
			}
			require.Positive(t, allowed)
			require.Positive(t, denied)
		})
	}
}

// TestLogScriptMatchesReference: on random arrivals and costs over a few
// keys, the store's sliding log decides what the exact in-process log
// (localcache.LogTable, itself checked against reference.Log) decides at the
// store's time of each decision, and its answer gives the same Remaining,
// ResetAfter and RetryAfter.
func TestLogScriptMatchesReference(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	for i, tc := range []struct {
		window time.Duration
		limit  int64
	}{
		{10 * time.Millisecond, 1},
		{10 * time.Millisecond, 5},
		{100 * time.Millisecond, 40},
	} {
		t.Run(fmt.Sprintf("%v/%d", tc.window, tc.limit), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(client, "l")
			cfg.Prefix = "log" + strconv.Itoa(i)
			s := startSyncer(t, cfg)
			r, err := s.addLog("l", tc.window, tc.limit)
			require.NoError(t, err)
			ref, err := localcache.NewLogTable(tc.window, tc.limit, localcache.NewKeys(100))
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(8, uint64(i)))
			iv := tc.window / time.Duration(tc.limit)
			var allowed, denied int
			ctx := ctxT(t, opTimeout)
			for step := 0; step < referenceSteps(); step++ {
				time.Sleep(strictGap(rng, iv))
				key := "k" + strconv.Itoa(rng.IntN(2))
				n := 1 + rng.Int64N(min(tc.limit, 4))
				peek := rng.IntN(10) == 0
				a, err := r.Decide(ctx, key, n, peek)
				require.NoError(t, err)
				at := fmt.Sprintf("step %d key %s n %d peek %v at %d", step, key, n, peek, a.At)
				var o verdict.Outcome
				if peek {
					o = ref.Peek(key, a.At)
				} else {
					o = ref.Allow(key, a.At, n)
				}
				require.Equal(t, o.Allowed, a.Admitted, at)
				require.Equal(t, tc.limit-o.Remaining, a.Count, at)
				if a.Count == 0 {
					require.Equal(t, int64(-1), a.Newest, at)
					require.Zero(t, o.ResetAfter, at)
				} else {
					require.Equal(t, o.ResetAfter, time.Duration(a.Newest+int64(tc.window)-a.At), at)
				}
				if peek {
					continue
				}
				if o.Allowed {
					allowed++
					require.Equal(t, int64(-1), a.Retry, at)
				} else {
					denied++
					require.Equal(t, o.RetryAfter, time.Duration(a.Retry+int64(tc.window)-a.At), at)
				}
			}
			require.Positive(t, allowed)
			require.Positive(t, denied)
		})
	}
}

// TestStrictRulesCluster: the Strict GCRA and sliding-log rules on a
// 3-master cluster: each key's state lives in its own hash-tag slot, keys
// spread over every master, each admits exactly its burst (its limit), and
// the scripts are reloaded after SCRIPT FLUSH on every node.
func TestStrictRulesCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	ctx := ctxT(t, opTimeout)
	s := startSyncer(t, testConfig(cc, "A"))
	g, err := s.addGCRA("bucket", int64(time.Minute), 3, 3)
	require.NoError(t, err)
	l, err := s.addLog("log", time.Hour, 4)
	require.NoError(t, err)

	masters := map[string]bool{}
	round := func(k string) (gAdmitted, lAdmitted int) {
		for range 6 {
			a, err := g.Decide(ctx, k, 1, false)
			require.NoError(t, err)
			if a.Admitted {
				gAdmitted++
			}
			b, err := l.Decide(ctx, k, 1, false)
			require.NoError(t, err)
			if b.Admitted {
				lAdmitted++
			}
		}
		return gAdmitted, lAdmitted
	}
	for i := 0; i < 30; i++ {
		k := "user:" + strconv.Itoa(i)
		if i == 15 {
			require.NoError(t, cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
				return c.ScriptFlush(ctx).Err()
			}))
		}
		ga, la := round(k)
		assert.Equal(t, 3, ga, "%s: the bucket's burst", k)
		assert.Equal(t, 4, la, "%s: the log's limit", k)
		for _, name := range []string{g.KeyName(k), l.KeyName(k)} {
			slot, err := cc.ClusterKeySlot(ctx, name).Result()
			require.NoError(t, err)
			tagSlot, err := cc.ClusterKeySlot(ctx, hashTag(name)).Result()
			require.NoError(t, err)
			assert.Equal(t, tagSlot, slot)
			m, err := cc.MasterForKey(ctx, name)
			require.NoError(t, err)
			masters[m.Options().Addr] = true
		}
		assert.Equal(t, int64(4), cc.LLen(ctx, l.KeyName(k)).Val(), "the log holds one entry per unit")
	}
	require.Len(t, masters, 3, "the keys span every master")
}
