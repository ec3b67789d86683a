package syncer

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// TestBulkPathWrongTypeKey syncs a key whose Redis key was overwritten with a
// string: its counts stay pending, the other keys sync, and the cycle does
// not fail.
func TestBulkPathWrongTypeKey(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	r := newRule(t, "api", midGeometry(6), 1000, tableport.NoCap)
	s := startSyncer(t, testConfig(c, "A"), r)
	require.True(t, s.bulk, "a standalone client takes the bulk path")
	require.NoError(t, c.Set(ctxT(t, opTimeout), r.keyName("bad"), "x", 0).Err())
	admit(t, s, r, "bad", 2)
	admit(t, s, r, "good", 3)
	flush(t, s)
	assert.Equal(t, int64(3), total(t, c, r.keyName("good")))
	_, own := estimate(t, r.Table, "bad", s.Now())
	assert.Equal(t, int64(2), own, "not pushed: still pending")
	_, own = estimate(t, r.Table, "good", s.Now())
	assert.Zero(t, own)

	// Once the key is free again, the counts arrive.
	require.NoError(t, c.Del(ctxT(t, opTimeout), r.keyName("bad")).Err())
	flush(t, s)
	assert.Equal(t, int64(2), total(t, c, r.keyName("bad")))
	_, own = estimate(t, r.Table, "bad", s.Now())
	assert.Zero(t, own)
}

// TestBulkNoScript syncs on a store without the script (new, or its script
// cache flushed): the call is refused, the script loaded and the call sent
// again, counted once.
func TestBulkNoScript(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	r := newRule(t, "api", midGeometry(6), 1000, tableport.NoCap)
	s := startSyncer(t, testConfig(c, "A"), r)
	admit(t, s, r, "k", 4)
	flush(t, s) // the first call gets NOSCRIPT, loads and resends
	assert.Equal(t, int64(4), total(t, c, r.keyName("k")))
	require.NoError(t, c.ScriptFlush(ctxT(t, opTimeout)).Err())
	admit(t, s, r, "k", 1)
	flush(t, s)
	assert.Equal(t, int64(5), total(t, c, r.keyName("k")))
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
	r := newRule(t, "api", midGeometry(4), 1_000_000, tableport.NoCap)
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
			ref, ok := r.Table.Control().Ref(k)
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
		sum += total(t, c, r.keyName(k))
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
	r := newRule(t, "api", geo, 1_000_000, tableport.NoCap)
	s := startSyncer(t, testConfig(c, "A"), r)
	require.True(t, s.bulk)
	name := r.keyName("k")
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
// store, are acknowledged and not pushed again with the reservation. The
// key stays below half of its cap, so that it asks for no early sync.
func TestReserveAfterLostBulkReply(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	hook := &faultHook{}
	c.AddHook(hook)
	loadScript(t, c)
	r := newRule(t, "api", midGeometry(4), 100, 10)
	s := startSyncer(t, testConfig(c, "A"), r)
	name := r.keyName("k")

	admit(t, s, r, "k", 4)
	admit(t, s, r, "other", 2)
	hook.dropReplies.Store(true)
	require.ErrorIs(t, s.Flush(ctxT(t, 30*time.Second)), errLost)
	hook.dropReplies.Store(false)
	require.Equal(t, int64(4), total(t, c, name), "the store applied the bulk call")
	require.Len(t, s.unacked, 1, "kept for a resend")
	_, own := estimate(t, r.Table, "k", s.Now())
	require.Equal(t, int64(4), own, "unacknowledged")

	// A reservation resends the bulk call before its own call: the
	// store recognises it and nothing is counted twice.
	ref, ok := r.Table.Control().Ref("k")
	require.True(t, ok)
	// The store is back (as a heartbeat would find it) but no cycle ran:
	// the unanswered bulk call is still queued when the reservation comes.
	require.False(t, s.isHealthy())
	s.setHealth(true, nil)
	res, err := r.Reserve(ctxT(t, opTimeout), "k", ref, 3)
	require.NoError(t, err)
	assert.True(t, res.Admitted)
	assert.Equal(t, int64(7), total(t, c, name), "4 pushed once + 3 reserved")
	assert.Equal(t, int64(2), total(t, c, r.keyName("other")))
	assert.Empty(t, s.unacked)
	flush(t, s)
	_, own = estimate(t, r.Table, "k", s.Now())
	assert.Zero(t, own)
	assert.Equal(t, int64(7), total(t, c, name))
}

// TestEarlySyncLostReply loses the replies of a cycle that serves a key's
// early sync (the key, busy, asked for it: 6 of its cap of 10) after collecting the
// key among the dirty ones: the early sync's call is kept for a resend, so
// the cycle's bulk call must not push the key's counts again. The store
// counts each admission once. The test runs the cycles itself.
func TestEarlySyncLostReply(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	hook := &faultHook{}
	c.AddHook(hook)
	loadScript(t, c)
	r := newRule(t, "api", midGeometry(4), 100, 10)
	s, err := newSyncer(testConfig(c, "A"), r) // not started: the test owns the loop's state
	require.NoError(t, err)
	require.NoError(t, s.heartbeat(ctxT(t, opTimeout)))
	s.setHealth(true, nil)
	name := r.keyName("k")

	admit(t, s, r, "other", 2)
	busy(t, s, r, "k")
	admit(t, s, r, "k", 6)
	require.True(t, s.early.Load(), "k asked for an early sync")
	hook.dropReplies.Store(true)
	require.Error(t, s.cycle())
	hook.dropReplies.Store(false)
	assert.Equal(t, int64(6), total(t, c, name), "the early sync reached the store")
	s.setHealth(true, nil)
	for range 3 {
		require.NoError(t, s.cycle())
	}
	assert.Equal(t, int64(6), total(t, c, name), "k counted once")
	assert.Equal(t, int64(2), total(t, c, r.keyName("other")))
	_, own := estimate(t, r.Table, "k", s.Now())
	assert.Zero(t, own)
	assert.Equal(t, int64(1), s.Stats().EarlySyncs)
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
	s.recs[keyID{r.windowRule, "old"}] = now - ttl - 1
	s.recs[keyID{r.windowRule, "fresh"}] = now - ttl + int64(time.Second)
	s.pruneRecs()
	assert.Equal(t, map[keyID]int64{{r.windowRule, "fresh"}: now - ttl + int64(time.Second)}, s.recs)
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
			require.NoError(t, c.Set(ctxT(t, opTimeout), r.keyName("bad"), "x", 0).Err())
			// A reservation on the bad key fails (WRONGTYPE) and leaves a
			// batch outstanding: from now on the key takes the per-key
			// path, first in every cycle.
			admit(t, s, r, "bad", 5)
			ref, ok := r.Table.Control().Ref("bad")
			require.True(t, ok)
			_, err := r.Reserve(ctxT(t, opTimeout), "bad", ref, 1)
			require.Error(t, err)
			for _, k := range []string{"a", "b", "c"} {
				admit(t, s, r, k, 2)
			}
			require.Error(t, s.Flush(ctxT(t, 30*time.Second)), "the bad key's call fails")
			assert.True(t, s.isHealthy(), "Redis answered: the store is healthy")
			for _, k := range []string{"a", "b", "c"} {
				assert.Equal(t, int64(2), total(t, c, r.keyName(k)), "%s synced despite the bad key", k)
			}
		})
	}
}

// TestBulkPathArgs syncs, in one bulk call, keys of two rules in turn, whose
// counts take each form of bulkScript's arguments: one count in the current
// bucket (in count groups of one key and of several), counts in two buckets,
// and one count in an earlier bucket only. Every count lands in its bucket
// and is acknowledged.
func TestBulkPathArgs(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	r1 := newRule(t, "one", midGeometry(4), 1000, tableport.NoCap)
	r2 := newRule(t, "two", midGeometry(6), 1000, tableport.NoCap)
	s := startSyncer(t, testConfig(c, "A"), r1, r2)
	require.True(t, s.bulk)
	now := s.Now()
	pushes := []push{
		{r1, "a", 0, 2},
		{r2, "b", 0, 3}, {r2, "b", 1, 4},
		{r1, "c", 2, 5},
		{r2, "d", 0, 1},
		{r1, "e", 0, 6},
		{r1, "f", 0, 2},
		{r2, "g", 0, 1},
		{r1, "h", 0, 1},
		{r2, "i", 0, 5},
	}
	want := admitPushes(t, now, pushes)
	flush(t, s)
	for name, w := range want {
		assert.Equal(t, w, buckets(t, c, name), name)
	}
	for _, p := range pushes {
		_, own := estimate(t, p.r.Table, p.key, s.Now())
		assert.Zero(t, own, "%s: acknowledged", p.key)
	}
	assert.Zero(t, s.Stats().Failures)
}

// TestBulkPullReadsWindow pulls a key whose hash holds, besides the window's
// buckets, a bucket that left the window, the per-key path's bookkeeping of
// other instances and a lease granted ahead in the next bucket: the view
// holds the window's buckets and the next one's grants (in the current
// bucket's total, as a per-key pull returns them), and nothing else.
func TestBulkPullReadsWindow(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	r := newRule(t, "api", midGeometry(4), 1000, tableport.NoCap)
	s := startSyncer(t, testConfig(c, "A"), r)
	require.True(t, s.bulk)
	k := r.geo.Index(s.Now())
	seq := itoa(s.Now() / 1000)
	require.NoError(t, c.HSet(ctxT(t, opTimeout), r.keyName("k"),
		itoa(k), "5", itoa(k-1), "7", itoa(k-2), "11",
		itoa(k-int64(r.span)-3), "1000", // out of the window
		itoa(k+1), "13", // granted ahead
		"i:B", seq, "r"+seq+":B", seq+":1:"+itoa(k)+":0:"+itoa(k),
	).Err())
	admit(t, s, r, "k", 1)
	flush(t, s)
	est, own := estimate(t, r.Table, "k", s.Now())
	assert.Equal(t, float64(5+7+11+1+13), est)
	assert.Zero(t, own)
	assert.Equal(t, int64(6), buckets(t, c, r.keyName("k"))[k])
}

// dupHook runs every pipeline twice and keeps the second reply, as when
// go-redis resends a pipeline after a network error that came after Redis
// had read it.
type dupHook struct{ on atomic.Bool }

func (h *dupHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *dupHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *dupHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.on.Load() {
			_ = next(ctx, cmds)
		}
		return next(ctx, cmds)
	}
}

// TestBulkRetries sends a bulk call whose keys take every form of
// bulkScript's arguments (a run of keys sharing a count, a key with a count
// of its own, keys with tokens, two rules), one of them not a hash, and
// makes it reach the store twice: the reply lost and the call resent by the
// syncer, or the pipeline resent by the client. Every count lands once, the
// key that is not a hash keeps its counts pending, and they land once it is
// a hash again.
func TestBulkRetries(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name string
		lost bool // the reply is lost (else the pipeline is run twice)
	}{
		{"reply lost", true},
		{"pipeline run twice", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := srv.Client(t) // own client: the hooks are per client
			fault, dup := &faultHook{}, &dupHook{}
			c.AddHook(fault)
			c.AddHook(dup)
			loadScript(t, c) // else the first call gets NOSCRIPT, hidden by the hooks
			r1 := newRule(t, "one", midGeometry(4), 1000, tableport.NoCap)
			r2 := newRule(t, "two", midGeometry(6), 1000, tableport.NoCap)
			cfg := testConfig(c, "A")
			cfg.Prefix = "retry" + itoa(int64(len(tc.name)))
			s := startSyncer(t, cfg, r1, r2)
			require.True(t, s.bulk)
			require.NoError(t, c.Set(ctxT(t, opTimeout), r1.keyName("bad"), "x", 0).Err())
			now := s.Now()
			pushes := []push{
				{r1, "a", 0, 2}, {r1, "b", 0, 2}, {r1, "bad", 0, 2}, {r1, "c", 0, 3},
				{r1, "d", 1, 4}, {r1, "d", 0, 1},
				{r2, "e", 0, 1}, {r2, "f", 0, 1}, {r2, "g", 2, 5},
			}
			want := admitPushes(t, now, pushes)
			if tc.lost {
				fault.dropReplies.Store(true)
				require.ErrorIs(t, s.Flush(ctxT(t, 30*time.Second)), errLost)
				fault.dropReplies.Store(false)
				require.Len(t, s.unacked, 1, "kept for a resend")
				s.setHealth(true, nil) // as the next heartbeat finds it
			} else {
				dup.on.Store(true)
			}
			flush(t, s) // the resend, or the pipeline run twice
			dup.on.Store(false)
			bad := r1.keyName("bad")
			for name, w := range want {
				if name != bad {
					assert.Equal(t, w, buckets(t, c, name), name)
				}
			}
			assert.Equal(t, "x", c.Get(ctxT(t, opTimeout), bad).Val())
			_, own := estimate(t, r1.Table, "bad", s.Now())
			assert.Equal(t, int64(2), own, "not a hash: still pending")
			for _, p := range pushes {
				if p.key != "bad" {
					_, own := estimate(t, p.r.Table, p.key, s.Now())
					assert.Zero(t, own, "%s: acknowledged", p.key)
				}
			}

			require.NoError(t, c.Del(ctxT(t, opTimeout), bad).Err())
			flush(t, s)
			assert.Equal(t, want[bad], buckets(t, c, bad))
			for name, w := range want {
				assert.Equal(t, w, buckets(t, c, name), "%s: once", name)
			}
		})
	}
}

// push is n admissions of key of rule r, back buckets before the current one.
type push struct {
	r    *testRule
	key  string
	back int64
	n    int
}

// admitPushes admits pushes at now and returns what the store must then
// hold: per Redis key, the count of each bucket.
func admitPushes(t *testing.T, now int64, pushes []push) map[string]map[int64]int64 {
	t.Helper()
	want := map[string]map[int64]int64{}
	for _, p := range pushes {
		at := now - p.back*p.r.geo.Sub()
		for range p.n {
			require.Equal(t, verdict.Allowed, p.r.Table.AllowAt(p.key, at, 1).Status)
		}
		name := p.r.keyName(p.key)
		if want[name] == nil {
			want[name] = map[int64]int64{}
		}
		want[name][p.r.geo.Index(at)] += int64(p.n)
	}
	return want
}
