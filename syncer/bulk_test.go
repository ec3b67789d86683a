package syncer

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/window"
)

// bulkRule is the per-rule part of a bulkScript call.
type bulkRule struct {
	sub   int64 // µs
	span  int
	ttl   int64 // ms
	bound int
}

// bulkPush is one limiter key of a bulkScript call.
type bulkPush struct {
	key    string
	rule   int // 1-based
	deltas [][2]int64
	drop   bool // clean now: the caller left a reservation record
}

// runBulk calls bulkScript the way Syncer.bulkArgs does and returns now µs,
// the applied flag and the failed key indices.
func runBulk(t *testing.T, c redis.Scripter, marker, seq string, rules []bulkRule, keys ...bulkPush) (int64, int64, []int64) {
	t.Helper()
	ks := []string{marker}
	args := []any{seq, 60_000, "me", len(rules)}
	for _, r := range rules {
		args = append(args, r.sub, r.span, r.ttl, r.bound)
	}
	for _, k := range keys {
		ks = append(ks, k.key)
		drop := 0
		if k.drop {
			drop = 1
		}
		args = append(args, k.rule, drop, len(k.deltas))
		for _, d := range k.deltas {
			args = append(args, d[0], d[1])
		}
	}
	v, err := bulkScript.Run(ctxT(t, opTimeout), c, ks, args...).Int64Slice()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(v), 2)
	return v[0], v[1], v[2:]
}

// TestBulkScript pushes several keys of two rules in one call, sends the call
// again (skipped whole), and checks the window rules, the TTL and a key of the
// wrong type failing alone.
func TestBulkScript(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	ctx := ctxT(t, opTimeout)
	nowUs := storeTimeUs(t, c)
	const k = 1000
	rules := []bulkRule{
		{sub: midSubUs(nowUs, k), span: 3, ttl: 60_000, bound: 40},
		{sub: midSubUs(nowUs, k), span: 1, ttl: 30_000, bound: 40},
	}
	require.NoError(t, c.Set(ctx, "str", "x", 0).Err())
	seq := itoa(nowUs)
	push := []bulkPush{
		{"a", 1, [][2]int64{{k, 3}, {k - 2, 4}, {k - 3, 5} /* out of the window */, {k + 7, 1} /* future: current */}, false},
		{"str", 1, [][2]int64{{k, 1}}, false},
		{"b", 2, [][2]int64{{k, 2}, {k - 1, 9} /* out of a span-1 window */}, false},
	}
	now, applied, failed := runBulk(t, c, "m", seq, rules, push...)
	assert.InDelta(t, nowUs, now, float64(5*time.Second/time.Microsecond), "now is the store's TIME in µs")
	assert.Equal(t, int64(1), applied)
	assert.Equal(t, []int64{2}, failed, "the string key fails alone")
	assert.Equal(t, map[string]string{itoa(k): "4", itoa(k - 2): "4"}, hash(t, c, "a"))
	assert.Equal(t, map[string]string{itoa(k): "2"}, hash(t, c, "b"))
	assert.Equal(t, "x", c.Get(ctx, "str").Val(), "untouched")
	assert.Equal(t, seq+":2", c.Get(ctx, "m").Val(), "the marker holds the call's number and its failed keys")
	for key, ttl := range map[string]time.Duration{"a": time.Minute, "b": 30 * time.Second} {
		pttl, err := c.PTTL(ctx, key).Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, pttl, ttl, key)
		assert.Greater(t, pttl, ttl-5*time.Second, key)
	}

	// The same call again (a lost reply, a go-redis retry): skipped whole,
	// with the failed keys it recorded; an older one: skipped.
	_, applied, failed = runBulk(t, c, "m", seq, rules, push...)
	assert.Equal(t, int64(0), applied)
	assert.Equal(t, []int64{2}, failed, "the resend learns which keys failed")
	_, applied, failed = runBulk(t, c, "m", itoa(nowUs-1), rules, push...)
	assert.Equal(t, int64(0), applied)
	assert.Empty(t, failed)
	assert.Equal(t, map[string]string{itoa(k): "4", itoa(k - 2): "4"}, hash(t, c, "a"), "nothing counted twice")
	assert.Equal(t, seq+":2", c.Get(ctx, "m").Val())

	// A newer call is applied on top.
	_, applied, _ = runBulk(t, c, "m", itoa(nowUs+1), rules, bulkPush{"a", 1, [][2]int64{{k, 1}}, false})
	assert.Equal(t, int64(1), applied)
	assert.Equal(t, "5", c.HGet(ctx, "a", itoa(k)).Val())
	assert.Equal(t, itoa(nowUs+1), c.Get(ctx, "m").Val(), "no failed keys")
}

// TestBulkScriptCleanup lets a hash grow past the field bound: the next push
// that starts a bucket removes the buckets out of the window and stale
// bookkeeping and the caller's reservation records, keeps the rest, and
// refreshes the TTL; a push into a bucket that exists does neither.
func TestBulkScriptCleanup(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	ctx := ctxT(t, opTimeout)
	nowUs := storeTimeUs(t, c)
	const k = 1000
	r := bulkRule{sub: midSubUs(nowUs, k), span: 2, ttl: 60_000, bound: 6}
	stale := itoa(nowUs - r.ttl*1000 - int64(time.Second/time.Microsecond))
	fresh := itoa(nowUs)
	require.NoError(t, c.HSet(ctx, "h",
		itoa(k-4), "1", itoa(k-3), "1", itoa(k-2), "1", // out of the window
		itoa(k-1), "1",
		"i:old", stale, "i:fresh", fresh, "r1:fresh", fresh+":1:5",
		"i:me", fresh, "r2:me", fresh+":1:5", // the caller's
	).Err())
	_, applied, failed := runBulk(t, c, "m", fresh, []bulkRule{r}, bulkPush{"h", 1, [][2]int64{{k, 2}}, false})
	require.Equal(t, int64(1), applied)
	require.Empty(t, failed)
	assert.Equal(t, map[string]string{
		itoa(k - 1): "1", itoa(k): "2",
		"i:fresh": fresh, "r1:fresh": fresh + ":1:5",
		"i:me": fresh, // the caller's reservation record goes, its sequence number stays
	}, hash(t, c, "h"))
	pttl, err := c.PTTL(ctx, "h").Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 50*time.Second, "a started bucket refreshes the TTL")

	// A push into the bucket that exists: no cleanup, no TTL refresh.
	require.NoError(t, c.HSet(ctx, "h", itoa(k-5), "1").Err())
	for range 4 {
		require.NoError(t, c.HSet(ctx, "h", "i:x"+itoa(int64(len(hash(t, c, "h")))), fresh).Err())
	}
	require.NoError(t, c.PExpire(ctx, "h", 20*time.Second).Err())
	runBulk(t, c, "m", itoa(nowUs+1), []bulkRule{r}, bulkPush{"h", 1, [][2]int64{{k, 1}}, false})
	assert.Equal(t, "1", c.HGet(ctx, "h", itoa(k-5)).Val(), "not cleaned")
	assert.Equal(t, "3", c.HGet(ctx, "h", itoa(k)).Val())
	pttl, err = c.PTTL(ctx, "h").Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, pttl, 20*time.Second, "not refreshed")

	// Asked to (the caller left a reservation record), a push into the
	// bucket that exists cleans too, without refreshing the TTL.
	require.NoError(t, c.HSet(ctx, "h", "r3:me", fresh+":1:5").Err())
	runBulk(t, c, "m", itoa(nowUs+2), []bulkRule{r}, bulkPush{"h", 1, [][2]int64{{k, 1}}, true})
	h := hash(t, c, "h")
	assert.NotContains(t, h, "r3:me")
	assert.NotContains(t, h, itoa(k-5))
	assert.Equal(t, "4", h[itoa(k)])
	pttl, err = c.PTTL(ctx, "h").Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, pttl, 20*time.Second, "not refreshed")
}

// TestBulkPathWrongTypeKey syncs a key whose Redis key was overwritten with a
// string: its counts stay pending, the other keys sync, and the cycle does
// not fail.
func TestBulkPathWrongTypeKey(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	r := newRule(t, "api", midGeometry(6), 1000, localcache.NoCap)
	s := startSyncer(t, testConfig(c, "A"), r)
	require.True(t, s.bulk, "a standalone client takes the bulk path")
	require.NoError(t, c.Set(ctxT(t, opTimeout), r.KeyName("bad"), "x", 0).Err())
	admit(t, s, r, "bad", 2)
	admit(t, s, r, "good", 3)
	flush(t, s)
	assert.Equal(t, int64(3), total(t, c, r.KeyName("good")))
	_, own := estimate(t, r.Table, "bad", s.Now())
	assert.Equal(t, int64(2), own, "not pushed: still pending")
	_, own = estimate(t, r.Table, "good", s.Now())
	assert.Zero(t, own)

	// Once the key is free again, the counts arrive.
	require.NoError(t, c.Del(ctxT(t, opTimeout), r.KeyName("bad")).Err())
	flush(t, s)
	assert.Equal(t, int64(2), total(t, c, r.KeyName("bad")))
	_, own = estimate(t, r.Table, "bad", s.Now())
	assert.Zero(t, own)
}

// TestBulkNoScript syncs on a store without the script (new, or its script
// cache flushed): the call is refused, the script loaded and the call sent
// again, counted once.
func TestBulkNoScript(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	r := newRule(t, "api", midGeometry(6), 1000, localcache.NoCap)
	s := startSyncer(t, testConfig(c, "A"), r)
	admit(t, s, r, "k", 4)
	flush(t, s) // the first call gets NOSCRIPT, loads and resends
	assert.Equal(t, int64(4), total(t, c, r.KeyName("k")))
	require.NoError(t, c.ScriptFlush(ctxT(t, opTimeout)).Err())
	admit(t, s, r, "k", 1)
	flush(t, s)
	assert.Equal(t, int64(5), total(t, c, r.KeyName("k")))
	assert.Zero(t, s.Stats().Failures)
	assert.Zero(t, s.Stats().Retried, "a call the store refused with NOSCRIPT did not run: not a retry")
}

// TestReserveDuringBulkCycles serves reservations while cycles of many small
// bulk batches run (two in flight at a time): a reservation pushes its key's
// pending counts on the per-key path, and those must not travel in a bulk
// call as well. Redis ends up with exactly what was admitted.
func TestReserveDuringBulkCycles(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	loadScript(t, c)
	r := newRule(t, "api", midGeometry(4), 1_000_000, localcache.NoCap)
	cfg := testConfig(c, "A")
	cfg.Batch = 2 // many batches per cycle, on both lanes
	s := startSyncer(t, cfg, r)
	require.True(t, s.bulk)
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = "k" + itoa(int64(i))
	}
	var reserved atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := keys[i%len(keys)]
			ref, ok := r.Table.Ref(k)
			if !ok {
				continue
			}
			res, err := r.Reserve(ctxT(t, opTimeout), k, ref, 1)
			if err == nil && res.Admitted {
				reserved.Add(1)
			}
		}
	}()
	admitted := int64(0)
	for round := 0; round < 20; round++ {
		for _, k := range keys {
			admit(t, s, r, k, 1)
			admitted++
		}
		flush(t, s)
	}
	close(stop)
	wg.Wait()
	flush(t, s)
	var sum int64
	for _, k := range keys {
		sum += total(t, c, r.KeyName(k))
		_, own := estimate(t, r.Table, k, s.Now())
		assert.Zero(t, own, "%s: everything acknowledged", k)
	}
	require.Positive(t, reserved.Load(), "the harness reserved while cycles ran")
	assert.Equal(t, admitted+reserved.Load(), sum, "every admission and reservation counted once")
	assert.Zero(t, s.Stats().Failures)
}

// TestBulkPathKeepsHashesSmall pushes a busy key through many buckets on the
// bulk path: its hash never holds more than the window's buckets and the one
// that just left it, as on the per-key path.
func TestBulkPathKeepsHashesSmall(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	geo := window.NewSliding(60*time.Millisecond, 3) // 20 ms buckets, span 4
	r := newRule(t, "api", geo, 1_000_000, localcache.NoCap)
	s := startSyncer(t, testConfig(c, "A"), r)
	require.True(t, s.bulk)
	name := r.KeyName("k")
	most := 0
	for i := 0; i < 40; i++ {
		admit(t, s, r, "k", 1)
		flush(t, s)
		most = max(most, len(hash(t, c, name)))
		time.Sleep(7 * time.Millisecond)
	}
	assert.LessOrEqual(t, most, geo.Span()+1, "fields of the hash at most")
	assert.GreaterOrEqual(t, most, 2, "harness: the key spans buckets")
}

// TestReserveAfterLostBulkReply loses the reply of a bulk call (the store
// applied it), then reserves on one of its keys: the reservation's sync
// resends the bulk call first, so the key's pending counts, already in the
// store, are acknowledged and not pushed again with the reservation.
func TestReserveAfterLostBulkReply(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	hook := &faultHook{}
	c.AddHook(hook)
	loadScript(t, c)
	r := newRule(t, "api", midGeometry(4), 100, 10)
	s := startSyncer(t, testConfig(c, "A"), r)
	name := r.KeyName("k")

	admit(t, s, r, "k", 6)
	admit(t, s, r, "other", 2)
	hook.dropReplies.Store(true)
	require.ErrorIs(t, s.Flush(ctxT(t, 30*time.Second)), errLost)
	hook.dropReplies.Store(false)
	require.Equal(t, int64(6), total(t, c, name), "the store applied the bulk call")
	require.Len(t, s.unacked, 1, "kept for a resend")
	_, own := estimate(t, r.Table, "k", s.Now())
	require.Equal(t, int64(6), own, "unacknowledged")

	// A reservation resends the bulk call before its own call: the
	// store recognises it and nothing is counted twice.
	ref, ok := r.Table.Ref("k")
	require.True(t, ok)
	// The store is back (as a heartbeat would find it) but no cycle ran:
	// the unanswered bulk call is still queued when the reservation comes.
	require.False(t, s.Healthy())
	s.setHealth(true, nil)
	res, err := r.Reserve(ctxT(t, opTimeout), "k", ref, 3)
	require.NoError(t, err)
	assert.True(t, res.Admitted)
	assert.Equal(t, int64(9), total(t, c, name), "6 pushed once + 3 reserved")
	assert.Equal(t, int64(2), total(t, c, r.KeyName("other")))
	assert.Empty(t, s.unacked)
	flush(t, s)
	_, own = estimate(t, r.Table, "k", s.Now())
	assert.Zero(t, own)
	assert.Equal(t, int64(9), total(t, c, name))
}

// TestPruneRecs forgets reservation records older than their key's TTL (the
// store has dropped them with the key) and keeps the others.
func TestPruneRecs(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	r := newRule(t, "api", midGeometry(4), 100, 10)
	now := time.Now().UnixNano()
	cfg := testConfig(c, "A")
	cfg.Clock = fixedClock(now)
	s, err := newSyncer(cfg, r) // not started: the test owns the loop's state
	require.NoError(t, err)
	ttl := r.ttlMs * int64(time.Millisecond)
	s.recs[keyID{r.Rule, "old"}] = now - ttl - 1
	s.recs[keyID{r.Rule, "fresh"}] = now - ttl + int64(time.Second)
	s.pruneRecs()
	assert.Equal(t, map[keyID]int64{{r.Rule, "fresh"}: now - ttl + int64(time.Second)}, s.recs)
}

// TestPerKeyErrorDoesNotStallCycles gives the per-key path a key whose
// Redis key is not a hash (its calls fail with WRONGTYPE, a reply from a
// healthy store): the cycle goes on with the other keys, in later
// pipelines too, instead of stopping at the failed one every time.
func TestPerKeyErrorDoesNotStallCycles(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			c := redistest.Start(t).Client(t)
			loadScript(t, c)
			r := newRule(t, "api", midGeometry(4), 1000, 5)
			cfg := testConfig(c, "A")
			cfg.Batch = 1 // one key per pipeline
			cfg.perKey = path.perKey
			s := startSyncer(t, cfg, r)
			require.NoError(t, c.Set(ctxT(t, opTimeout), r.KeyName("bad"), "x", 0).Err())
			// A reservation on the bad key fails (WRONGTYPE) and leaves a
			// batch outstanding: from now on the key takes the per-key
			// path, first in every cycle.
			admit(t, s, r, "bad", 5)
			ref, ok := r.Table.Ref("bad")
			require.True(t, ok)
			_, err := r.Reserve(ctxT(t, opTimeout), "bad", ref, 1)
			require.Error(t, err)
			for _, k := range []string{"a", "b", "c"} {
				admit(t, s, r, k, 2)
			}
			require.Error(t, s.Flush(ctxT(t, 30*time.Second)), "the bad key's call fails")
			assert.True(t, s.Healthy(), "Redis answered: the store is healthy")
			for _, k := range []string{"a", "b", "c"} {
				assert.Equal(t, int64(2), total(t, c, r.KeyName(k)), "%s synced despite the bad key", k)
			}
		})
	}
}
