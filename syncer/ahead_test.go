package syncer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/keyname"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/vclock"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// leasing starts a syncer on c for a rule with leases on 2 s buckets (a
// lease-ahead pass runs 250 ms before each ends) and returns early in a
// bucket, k, so that a test runs within it and the next.
func leasing(t *testing.T, c redis.UniversalClient) (window.Sliding, *testRule, *Syncer, int64) {
	t.Helper()
	geo := window.NewSliding(8*time.Second, 4)
	r := newRule(t, "api", geo, 1000, 10)
	r.cfg.Leases = true
	s := startSyncer(t, testConfig(c, "A"), r)
	for geo.Phase(s.Now()) > 0.25 {
		time.Sleep(10 * time.Millisecond)
	}
	return geo, r, s, geo.Index(s.Now())
}

// TestLeaseAhead: a key holding a lease of the current bucket that admits on
// it is leased the next bucket before the current one ends, with no sync
// cycle and no check waiting: the store counts the grant in the next
// bucket, and once that bucket starts the key admits the grant on top of
// its cap. A key that holds no lease is not synced. The test runs the pass
// itself, on a virtual clock (leasingByHand); TestReturnPass and
// TestCloseLeasesNothingAfterItsFlush have the loop run it on time.
func TestLeaseAhead(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	geo, r, s, k, clk := leasingByHand(t, c)
	admit(t, s, r, "quiet", 1)
	busy(t, s, r, "k")
	admit(t, s, r, "k", 5) // the fifth asks for an early sync, which brings a lease
	s.serveUrgent()        // as the loop does
	require.Equal(t, int64(1), s.Stats().EarlySyncs)
	ref, ok := r.Table.Control().Ref("k")
	require.True(t, ok)
	_, own := estimate(t, r.Table, "k", s.Now())
	require.Zero(t, own, "the sync settled")
	require.Greater(t, room(r.Table, "k", s.Now()), int64(900), "with a lease")
	admit(t, s, r, "k", 20) // on the lease
	want := r.Table.SyncKeys().NextWant(ref, s.Now(), 0)
	require.Positive(t, want)

	clk.NS.Add((k+1)*geo.Sub() - aheadLead(r.windowRule) - 1 - s.Now())
	s.leaseAhead()
	name := r.keyName("k")
	require.Equal(t, keyname.Window(s.cfg.Prefix, "api", "k", geo), name, "the key the tools read")
	require.Zero(t, buckets(t, c, name)[k+1], "no pass before it is due")
	clk.NS.Add(1)
	s.leaseAhead()
	ahead := buckets(t, c, name)[k+1]
	require.Positive(t, ahead, "the next bucket's lease is in the store before the bucket starts")
	assert.Equal(t, int64(2), s.Stats().EarlySyncs, "one early sync, one sync ahead")
	assert.Zero(t, s.Stats().UrgentCycles, "no check waited")
	_, ok = buckets(t, c, r.keyName("quiet"))[k+1]
	assert.False(t, ok, "a key without a lease is not leased ahead")

	clk.NS.Add((k+1)*geo.Sub() - s.Now()) // the next bucket starts
	now := s.Now()
	r.Table.Control().Tick(now)
	n := int64(0)
	for r.Table.AllowAt("k", now, 1).Status == verdict.Allowed && n < 5000 {
		n++
	}
	assert.GreaterOrEqual(t, n, ahead+10, "the new bucket starts with the lease granted ahead, and the cap")
	require.NoError(t, s.flush())
	_, own = estimate(t, r.Table, "k", s.Now())
	assert.Zero(t, own)
}

// TestCloseLeasesNothingAfterItsFlush: Close's flush gives back every lease
// and the loop stops right after it. A lease-ahead pass that falls due while
// the flush waits for the store (paused here across the pass's due time)
// must not run once the flush is done: the units it would lease, counted in
// the store at once, would never be given back, and the store would count
// more than was admitted. Three closes (one with -short), each in its own
// bucket.
func TestCloseLeasesNothingAfterItsFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t)
	t.Cleanup(srv.Resume)                      // before the kill of the server's own cleanup
	geo := window.NewSliding(4*time.Second, 4) // 1 s buckets: the pass runs 125 ms before each ends
	closes := 3
	if testing.Short() {
		closes = 1 // each close takes its bucket, up to 1.25 s
	}
	for i := range closes {
		r := newRule(t, "api"+itoa(int64(i)), geo, 1000, 10)
		r.cfg.Leases = true
		s := startSyncer(t, testConfig(c, "A"+itoa(int64(i))), r)
		for geo.Phase(s.Now()) > 0.25 {
			time.Sleep(10 * time.Millisecond)
		}
		k := geo.Index(s.Now())
		busy(t, s, r, "k")
		admit(t, s, r, "k", 5) // the fifth asks for an early sync, which brings a lease
		require.Eventually(t, func() bool {
			_, own := estimate(t, r.Table, "k", s.Now())
			return s.Stats().EarlySyncs == 1 && own == 0 && room(r.Table, "k", s.Now()) > 900
		}, 5*time.Second, time.Millisecond, "close %d: the early sync settled, with a lease", i)
		// On the lease, more than twice the cap: the key is leased ahead at
		// the pass (Keys.NextWant).
		admit(t, s, r, "k", 40)

		due := (k+1)*geo.Sub() - geo.Sub()/8
		time.Sleep(time.Duration(due-s.Now()) - 30*time.Millisecond)
		srv.Pause()
		closed := make(chan error, 1)
		go func() { closed <- s.Close(ctxT(t, 10*time.Second)) }()
		time.Sleep(time.Duration(due-s.Now()) + 30*time.Millisecond)
		srv.Resume()
		require.NoError(t, <-closed)
		assert.Zero(t, buckets(t, c, r.keyName("k"))[k+1], "close %d: nothing leased ahead after Close's flush", i)
		assert.Equal(t, int64(45), total(t, c, r.keyName("k")), "close %d: the store counts what was admitted", i)
	}
}

// TestLeaseWantsItsPeak: a sync that asks for a lease of the current bucket
// (an early sync, a check at the cap) asks for at least the most leased
// units the key used in one bucket of the window, so that a key hit in
// bursts gets a burst's worth at once instead of a doubling series of round
// trips; a peak that has left the window no longer counts, and no peak
// takes the key past holdMost.
func TestLeaseWantsItsPeak(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	geo := midGeometry(4) // hours-long sub-windows: the test stays in one bucket
	r := newRule(t, "api", geo, 1000, 2)
	r.cfg.Leases = true
	s, err := newSyncer(testConfig(c, "A"), r)
	require.NoError(t, err)
	now := s.Now()
	k, span := geo.Index(now), int64(geo.Span())
	require.Equal(t, verdict.Allowed, r.Table.AllowAt("k", now, 1).Status)
	ref, ok := r.Table.Control().Ref("k")
	require.True(t, ok)
	id := keyID{rule: r.windowRule, key: "k"}
	base := r.Table.SyncKeys().Want(ref, now, 0)
	require.Less(t, base, int64(40))

	wantArg := func() any {
		cl := call{it: item{id: id, ref: ref, lease: true}, batches: []*batch{{seq: 1}}}
		return s.args(nil, &cl)[13] // after the key, the store's epoch key
	}
	tests := []struct {
		name   string
		peak   int64
		peakAt int64
		want   int64
	}{
		{"no peak", 0, 0, base},
		{"a peak in the window", 40, k - span + 1, 40},
		{"a peak out of the window", 40, k - span, base},
		{"a peak past holdMost", 300, k, 49}, // ⌊(⌊1000/10⌋ − 1)/(N̂+1)⌋ at N̂ = 1
	}
	for _, tt := range tests {
		delete(s.uses, id)
		if tt.peakAt != 0 {
			s.uses[id] = use{ref: ref, peak: tt.peak, peakAt: tt.peakAt, last: tt.peakAt}
		}
		assert.Equal(t, tt.want, wantArg(), tt.name)
	}
}

// orderHook records the limiter keys of the per-key script calls of each
// pipeline, in the order the pipelines are sent, once on is set; before the
// first pipeline that holds one of the keys of first, it calls before once.
type orderHook struct {
	on     atomic.Bool
	first  map[string]bool
	before func()
	mu     sync.Mutex
	sent   [][]string
}

func (h *orderHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *orderHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *orderHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.on.Load() {
			var keys []string
			for _, c := range cmds {
				if a := c.Args(); len(a) > 3 && strings.HasPrefix(strings.ToLower(c.Name()), "eval") {
					keys = append(keys, fmt.Sprint(a[3]))
				}
			}
			h.mu.Lock()
			f := h.before
			start := len(keys) > 0 && h.first[keys[0]] && f != nil
			if start {
				h.before = nil
			}
			h.mu.Unlock()
			if start {
				f()
			}
			h.mu.Lock()
			h.sent = append(h.sent, keys)
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// hooked returns a client of a fresh server, with an orderHook.
func hooked(t *testing.T) (*redis.Client, *orderHook) {
	t.Helper()
	c := redistest.Start(t).Client(t)
	h := &orderHook{first: map[string]bool{}}
	c.AddHook(h)
	return c, h
}

// around counts the keys of first sent before the call of key mark and
// after it, and reports whether mark's was sent.
func (h *orderHook) around(mark string) (before, after int, seen bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.sent {
		for _, key := range p {
			switch {
			case key == mark:
				seen = true
			case !h.first[key]:
			case seen:
				after++
			default:
				before++
			}
		}
	}
	return before, after, seen
}

// reserveBefore makes h queue a reservation of key u of r, before the first
// pipeline of a key of h.first, and wait until s has it; the reservation's
// error goes to the channel returned.
func reserveBefore(t *testing.T, h *orderHook, s *Syncer, r *testRule) <-chan error {
	reserved := make(chan error, 1)
	h.mu.Lock()
	h.before = func() {
		go func() {
			_, err := r.Reserve(ctxT(t, opTimeout), "u", nil, 1)
			reserved <- err
		}()
		for !s.hasUrgent() {
			time.Sleep(100 * time.Microsecond)
		}
	}
	h.mu.Unlock()
	h.on.Store(true)
	return reserved
}

// warmUp has s serve a reservation of key w of r, so that its background
// work keeps to pipelines of urgentEvery keys (step) for urgentRecent. With
// loop, s's loop serves it; else it is served here.
func warmUp(t *testing.T, s *Syncer, r *testRule, loop bool) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := r.Reserve(ctxT(t, opTimeout), "w", nil, 1)
		done <- err
	}()
	if !loop {
		require.Eventually(t, s.hasUrgent, 5*time.Second, 100*time.Microsecond)
		s.serveUrgent()
	}
	require.NoError(t, <-done)
}

// servedAmid requires that the reservation of key u (reserveBefore) was
// answered and that the n keys of h.first were each sent once: if amid,
// at most urgentEvery of them before the reservation; else all of them
// before it, in one pipeline.
func servedAmid(t *testing.T, h *orderHook, r *testRule, reserved <-chan error, n int, amid bool) {
	t.Helper()
	select {
	case err := <-reserved:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the reservation was not answered")
	}
	require.Eventually(t, func() bool {
		before, after, _ := h.around(r.keyName("u"))
		return before+after >= n
	}, 5*time.Second, time.Millisecond, "every key was sent")
	before, after, seen := h.around(r.keyName("u"))
	require.True(t, seen, "the reservation's call was sent")
	assert.Equal(t, n, before+after, "every key was sent once")
	if amid {
		assert.LessOrEqual(t, before, urgentEvery, "keys sent before the reservation")
		return
	}
	assert.Equal(t, n, before, "keys sent before the reservation")
	h.mu.Lock()
	defer h.mu.Unlock()
	pipelines := 0
	for _, p := range h.sent {
		if len(p) > 0 && h.first[p[0]] {
			pipelines++
		}
	}
	assert.Equal(t, 1, pipelines, "pipelines of the keys")
}

// eachWaited runs test in a parallel subtest for each case of
// TestPassServesReservations and TestCycleServesReservations: a check
// waited for the store just before (warm: the syncer then sends its
// background work in pipelines of urgentEvery keys, serving reservations
// between them) or none did for a while (one pipeline of Config.Batch
// keys: no round trip more).
func eachWaited(t *testing.T, test func(t *testing.T, warm bool)) {
	for _, tt := range []struct {
		name string
		warm bool
	}{
		{"a check waited just before", true},
		{"no check waited", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			test(t, tt.warm)
		})
	}
}

// TestPassServesReservations: a reservation queued while a lease-ahead pass
// runs, soon after another, is sent after at most urgentEvery keys of the
// pass, not behind the whole pass (at a minute-long rule, a pass over a
// thousand keys held the checks that waited for the store for 20-50 ms).
func TestPassServesReservations(t *testing.T) {
	t.Parallel()
	eachWaited(t, func(t *testing.T, warm bool) {
		c, h := hooked(t)
		geo, r, s, k, clk := leasingByHand(t, c)
		const keys = 5 * urgentEvery
		for i := range keys {
			key := "p" + itoa(int64(i))
			h.first[r.keyName(key)] = true
			busy(t, s, r, key)
			admit(t, s, r, key, 5) // the fifth asks for an early sync, which brings a lease
			s.serveUrgent()
			_, own := estimate(t, r.Table, key, s.Now())
			require.Equal(t, int64(i+1), s.Stats().EarlySyncs, "%s: the early sync was sent", key)
			require.Zero(t, own, "%s: the early sync settled", key)
			require.Greater(t, room(r.Table, key, s.Now()), int64(900), "%s: with a lease", key)
			admit(t, s, r, key, 20) // on the lease: the pass leases it the next bucket
		}
		due := (k+1)*geo.Sub() - aheadLead(r.windowRule)
		if warm {
			clk.NS.Add(due - s.Now() - int64(100*time.Millisecond))
			warmUp(t, s, r, false)
		}
		clk.NS.Add(due - s.Now())
		reserved := reserveBefore(t, h, s, r)
		s.leaseAhead() // on this goroutine
		require.Equal(t, k, r.ahead, "the pass ran for bucket %d", k)
		s.serveUrgent() // as the loop does next: what the pass left queued
		servedAmid(t, h, r, reserved, keys, warm)
	})
}

// leasingByHand returns, for a test that drives the syncer by hand (no
// loop: it serves the early syncs and runs the passes itself), a syncer on
// c on a virtual clock, with a rule with leases whose buckets are hours
// long, and the current bucket, k: the store's clock stays in the middle of
// k while the test runs (midGeometry), and the virtual clock, which starts
// on the store's time, may be moved anywhere within k (the lease-ahead
// pass is due an eighth of a bucket before its end) with no bucket
// boundary between what the syncer and the store take for the current
// bucket.
func leasingByHand(t *testing.T, c redis.UniversalClient) (window.Sliding, *testRule, *Syncer, int64, *vclock.Clock) {
	t.Helper()
	geo := midGeometry(4)
	r := newRule(t, "api", geo, 1000, 10)
	r.cfg.Leases = true
	clk := &vclock.Clock{}
	clk.NS.Store(time.Now().UnixNano())
	cfg := testConfig(c, "A")
	cfg.Clock = clk
	s, err := newSyncer(cfg, r)
	require.NoError(t, err)
	require.NoError(t, s.heartbeat(ctxT(t, opTimeout)))
	s.setHealth(true, nil)
	k := geo.Index(s.Now())
	require.Equal(t, k, geo.Index(storeTimeUs(t, c)*int64(time.Microsecond)), "the store is in the syncer's bucket")
	return geo, r, s, k, clk
}

// TestCycleServesReservations: as TestPassServesReservations, for a sync
// cycle's per-key calls.
func TestCycleServesReservations(t *testing.T) {
	t.Parallel()
	eachWaited(t, func(t *testing.T, warm bool) {
		c, h := hooked(t)
		loadScript(t, c) // no call sent twice for a NOSCRIPT
		r := newRule(t, "api", window.NewSliding(time.Minute, 6), 1000, 10)
		cfg := testConfig(c, "A")
		cfg.perKey = true // every key on the per-key path
		s, err := newSyncer(cfg, r)
		require.NoError(t, err)
		require.NoError(t, s.heartbeat(ctxT(t, opTimeout)))
		s.setHealth(true, nil)
		const keys = 5 * urgentEvery
		for i := range keys {
			key := "p" + itoa(int64(i))
			h.first[r.keyName(key)] = true
			admit(t, s, r, key, 1) // dirty: in the cycle
		}
		if warm {
			warmUp(t, s, r, false)
		}
		reserved := reserveBefore(t, h, s, r)
		require.NoError(t, s.cycle()) // on this goroutine: no loop serves the reservation but the cycle
		servedAmid(t, h, r, reserved, keys, warm)
	})
}
