package sluice_test

import (
	"context"
	"fmt"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/reference"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// fakeClock is a settable Options.Clock.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time   { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) set(t int64)      { c.ns.Store(t) }
func (c *fakeClock) add(d int64)      { c.ns.Add(d) }
func (c *fakeClock) nanos() int64     { return c.ns.Load() }
func newFakeClock(t int64) *fakeClock { c := &fakeClock{}; c.set(t); return c }

// newAlgoLimiter returns a store-less limiter of rule on clock c.
func newAlgoLimiter(t *testing.T, c *fakeClock, rules ...policy.Rule) *sluice.Limiter {
	t.Helper()
	l, err := sluice.New(sluice.Options{Clock: c}, rules...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// algoGap returns a random arrival gap around the interval iv: mostly
// within it (keys drain), sometimes zero, sometimes long (they refill).
func algoGap(r *rand.Rand, iv int64) int64 {
	switch r.IntN(20) {
	case 0:
		return r.Int64N(40 * iv)
	case 1, 2:
		return 0
	}
	return r.Int64N(iv)
}

// TestBucketsMatchReference: through Allow/AllowN, a TokenBucket rule
// decides what the classic two-number token bucket (reference.TokenBucket)
// decides and a GCRA rule what window.GCRA decides, on random arrivals and
// costs over a few keys; every Decision field is the reference's.
func TestBucketsMatchReference(t *testing.T) {
	t.Parallel()
	for i, tc := range []policy.Rule{
		{Name: "tb", Limit: 10, Window: time.Second, Algorithm: policy.TokenBucket},
		{Name: "tb-burst", Limit: 10, Window: time.Second, Algorithm: policy.TokenBucket, Burst: 3},
		{Name: "gcra", Limit: 100, Window: time.Minute, Algorithm: policy.GCRA, Burst: 25},
		{Name: "gcra-3", Limit: 3, Window: time.Second, Algorithm: policy.GCRA, Burst: 1},
	} {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			c := newFakeClock(1_800_000_000 * int64(time.Second))
			l := newAlgoLimiter(t, c, tc)
			g := window.NewGCRA(tc.Window, tc.Limit, tc.Burst)
			b := reference.NewTokenBucket(tc.Window, tc.Limit, tc.Burst)
			tats := map[string]int64{}
			tokens := map[string]reference.Tokens{}
			rng := rand.New(rand.NewPCG(41, uint64(i)))
			var allowed, denied int
			for step := 0; step < 3000; step++ {
				c.add(algoGap(rng, g.Interval()))
				now := c.nanos()
				key := fmt.Sprint("user-", rng.IntN(3))
				n := 1 + rng.Int64N(min(tc.MaxCost(), 4))
				at := fmt.Sprintf("step %d t=%d key=%s n=%d", step, now, key, n)
				s, ok := tokens[key]
				if !ok {
					s = b.Full(now)
				}
				want := sluice.Decision{Limit: tc.Limit}
				if tc.Algorithm == policy.TokenBucket {
					next, ok := b.Admit(s, now, n)
					want.Allowed = ok
					want.RetryAfter = b.RetryAfter(s, now, n)
					if ok {
						tokens[key], s = next, next
					}
					want.Remaining = b.Remaining(s, now)
					want.ResetAfter = time.Duration(g.Tolerance() - b.Refill(s, now).Level)
				} else {
					tat := tats[key]
					next, ok := g.Admit(tat, now, n)
					want.Allowed = ok
					want.RetryAfter = g.RetryAfter(tat, now, n)
					if ok {
						tats[key], tat = next, next
					}
					want.Remaining = g.Remaining(tat, now)
					want.ResetAfter = g.ResetAfter(tat, now)
				}
				d, err := l.AllowN(context.Background(), tc.Name, key, n)
				require.NoError(t, err, at)
				require.Equal(t, want, d, at)
				if d.Allowed {
					allowed++
				} else {
					denied++
				}
			}
			require.Positive(t, allowed)
			require.Positive(t, denied)
		})
	}
}

// TestWarmUpMatchesReference: a rule with a WarmUp decides what
// window.WarmUp (Guava's SmoothWarmingUp, decided now) decides, on a state
// rounded as the limiter packs it; every Decision field is the reference's.
func TestWarmUpMatchesReference(t *testing.T) {
	t.Parallel()
	for i, tc := range []policy.Rule{
		{Name: "tb-warm", Limit: 10, Window: time.Second, Algorithm: policy.TokenBucket, WarmUp: 5 * time.Second},
		{Name: "gcra-warm", Limit: 100, Window: time.Second, Algorithm: policy.GCRA, Burst: 20, WarmUp: 2 * time.Second},
	} {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			c := newFakeClock(1_800_000_000*int64(time.Second) + 555)
			l := newAlgoLimiter(t, c, tc)
			w := window.NewWarmUp(tc.Window, tc.WarmUp, tc.Limit, tc.Burst)
			ref := map[string]window.Warm{}
			rng := rand.New(rand.NewPCG(42, uint64(i)))
			iv := int64(tc.Interval())
			var allowed, denied int
			for step := 0; step < 3000; step++ {
				if rng.IntN(100) == 0 {
					c.add(rng.Int64N(2 * int64(tc.WarmUp))) // idle: cold again
				}
				c.add(algoGap(rng, iv))
				now := c.nanos()
				key := fmt.Sprint("user-", rng.IntN(3))
				n := 1 + rng.Int64N(3)
				s, seen := ref[key]
				if !seen {
					s = w.Fresh(now)
				}
				next, ok, _, _, retry := w.Check(s, now, n)
				want := sluice.Decision{Limit: tc.Limit, Allowed: ok, RetryAfter: retry}
				if ok {
					s = reference.RoundWarm(w.Unit(), next)
					ref[key] = s
				}
				want.Remaining, want.ResetAfter = w.Remaining(s, now), w.ResetAfter(s, now)
				d, err := l.AllowN(context.Background(), tc.Name, key, n)
				require.NoError(t, err, "step %d", step)
				require.Equal(t, want, d, "step %d t=%d key=%s n=%d", step, now, key, n)
				if d.Allowed {
					allowed++
				} else {
					denied++
				}
			}
			require.Positive(t, allowed)
			require.Positive(t, denied)
		})
	}
}

// TestSlidingLogMatchesOracle: a SlidingLog rule decides what the exact
// reference.Log decides; Remaining is Limit less the units in the window;
// ResetAfter is the Window after an admission; a denial's RetryAfter is
// exact on the oracle (denied 1ns before, admitted at it).
func TestSlidingLogMatchesOracle(t *testing.T) {
	t.Parallel()
	for i, tc := range []policy.Rule{
		{Name: "log", Limit: 10, Window: time.Second, Algorithm: policy.SlidingLog},
		{Name: "log-1", Limit: 1, Window: time.Minute, Algorithm: policy.SlidingLog},
		{Name: "log-max", Limit: policy.MaxLogLimit, Window: time.Second, Algorithm: policy.SlidingLog},
	} {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			c := newFakeClock(1_800_000_000 * int64(time.Second))
			l := newAlgoLimiter(t, c, tc)
			ref := reference.NewLog(tc.Window, tc.Limit)
			type ev struct{ t, n int64 }
			var events []ev
			rng := rand.New(rand.NewPCG(43, uint64(i)))
			iv := int64(tc.Interval())
			var denied int
			for step := 0; step < 3000; step++ {
				c.add(algoGap(rng, iv))
				now := c.nanos()
				n := 1 + rng.Int64N(min(tc.Limit, 4))
				at := fmt.Sprintf("step %d t=%d n=%d", step, now, n)
				want := ref.Allow(now, n)
				d, err := l.AllowN(context.Background(), tc.Name, "k", n)
				require.NoError(t, err, at)
				require.Equal(t, want, d.Allowed, at)
				require.Equal(t, tc.Limit-ref.InWindow(now), d.Remaining, at)
				if want {
					events = append(events, ev{now, n})
					require.Equal(t, tc.Window, d.ResetAfter, at)
					require.Zero(t, d.RetryAfter, at)
					continue
				}
				denied++
				if denied%7 == 0 {
					o := reference.NewLog(tc.Window, tc.Limit)
					for _, e := range events {
						o.Add(e.t, e.n)
					}
					ra := int64(d.RetryAfter)
					require.False(t, o.Allow(now+ra-1, n), at)
					require.True(t, o.Allow(now+ra, n), at)
				}
			}
			require.Positive(t, denied)
		})
	}
}

// TestNewAlgorithmsModes: TokenBucket, GCRA and SlidingLog work in Local
// mode with or without a store and in Strict mode with one; the buckets
// (without a WarmUp) in Eventual mode too, explicitly or as the default
// with a store. A SlidingLog's or a WarmUp's Eventual is refused,
// explicitly (by Validate, with the reason) or as the default with a store
// (by New), and both errors say which modes to use.
func TestNewAlgorithmsModes(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	for _, rc := range []struct {
		a    policy.Algorithm
		warm time.Duration
	}{{policy.TokenBucket, 0}, {policy.GCRA, 0}, {policy.SlidingLog, 0}, {policy.GCRA, time.Second}} {
		a, eventual := rc.a, "" // the error of Eventual: none for a bucket
		if a == policy.SlidingLog || rc.warm > 0 {
			eventual = "Eventual"
		}
		for _, tc := range []struct {
			mode  policy.Mode
			store bool
			err   string // "" if accepted
		}{
			{policy.Local, false, ""},
			{policy.Local, true, ""},
			{policy.ModeDefault, false, ""},
			{policy.Strict, true, map[bool]string{true: "WarmUp 1s with Mode Strict"}[rc.warm > 0]},
			{policy.Strict, false, map[bool]string{false: "needs a store", true: "WarmUp 1s with Mode Strict"}[rc.warm > 0]},
			{policy.ModeDefault, true, map[bool]string{true: "has no Mode Eventual, the default with a store"}[eventual != ""]},
			{policy.Eventual, true, eventual},
		} {
			t.Run(fmt.Sprintf("%v/warm=%v/%v/store=%v", a, rc.warm, tc.mode, tc.store), func(t *testing.T) {
				t.Parallel()
				rule := policy.Rule{Name: "r", Limit: 10, Window: time.Second, Algorithm: a, Mode: tc.mode, WarmUp: rc.warm}
				opts := sluice.Options{Prefix: fmt.Sprintf("modes-%d-%d-%d", a, tc.mode, rc.warm)}
				if tc.store {
					opts.Redis = client
				}
				l, err := sluice.New(opts, rule)
				if tc.err == "" {
					require.NoError(t, err)
					_ = l.Close()
					return
				}
				require.ErrorIs(t, err, policy.ErrInvalidRule)
				require.ErrorContains(t, err, tc.err)
				require.ErrorContains(t, err, "policy.Local")
				if tc.mode != policy.Strict && rc.warm == 0 {
					require.ErrorContains(t, err, "policy.Strict", "the mode that shares the algorithm")
				}
			})
		}
	}
}

// TestBurstBoundsCost: a bucket's largest cost is its Burst, above or below
// its Limit; a larger cost is ErrInvalidCost naming the Burst.
func TestBurstBoundsCost(t *testing.T) {
	t.Parallel()
	c := newFakeClock(1_800_000_000 * int64(time.Second))
	l := newAlgoLimiter(t, c,
		policy.Rule{Name: "big", Limit: 10, Window: time.Second, Algorithm: policy.GCRA, Burst: 50},
		policy.Rule{Name: "small", Limit: 10, Window: time.Second, Algorithm: policy.TokenBucket, Burst: 2},
	)
	ctx := context.Background()
	d, err := l.AllowN(ctx, "big", "k", 50)
	require.NoError(t, err)
	require.True(t, d.Allowed, "a full bucket admits its Burst at once")
	require.Equal(t, int64(10), d.Limit)
	_, err = l.AllowN(ctx, "big", "k", 51)
	require.ErrorIs(t, err, sluice.ErrInvalidCost)
	require.ErrorContains(t, err, "the rule's Burst 50")
	d, err = l.AllowN(ctx, "small", "k", 2)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	_, err = l.AllowN(ctx, "small", "k", 3)
	require.ErrorIs(t, err, sluice.ErrInvalidCost)
	require.ErrorContains(t, err, "the rule's Burst 2")
}

// TestNewAlgorithmsSweep: idle keys of the new algorithms leave the cache
// (so the key bound holds), and come back fresh.
func TestNewAlgorithmsSweep(t *testing.T) {
	t.Parallel()
	c := newFakeClock(1_800_000_000 * int64(time.Second))
	rules := []policy.Rule{
		{Name: "gcra", Limit: 10, Window: time.Second, Algorithm: policy.GCRA},
		{Name: "warm", Limit: 10, Window: time.Second, Algorithm: policy.GCRA, WarmUp: time.Second},
		{Name: "log", Limit: 10, Window: time.Second, Algorithm: policy.SlidingLog},
	}
	l, err := sluice.New(sluice.Options{Clock: c, MaxKeys: 3}, rules...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	for _, r := range rules {
		d, err := l.Allow(ctx, r.Name, "a")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	// The bound is full: a new key would be decided on each rule's sketch
	// of untracked keys until a sweep makes room.
	require.Eventually(t, func() bool {
		c.add(int64(time.Hour)) // every key idle: the background sweep evicts them
		d, err := l.Peek("gcra", "a")
		return err == nil && d.Remaining == 10 && l.Stats().Keys == 0
	}, 10*time.Second, 50*time.Millisecond)
}

// TestNewAlgorithmsDoNotAllocate: a check of a tracked key allocates
// nothing, admitted or denied. Not parallel: AllocsPerRun counts every
// goroutine's allocations.
func TestNewAlgorithmsDoNotAllocate(t *testing.T) {
	c := newFakeClock(1_800_000_000 * int64(time.Second))
	l := newAlgoLimiter(t, c,
		policy.Rule{Name: "gcra", Limit: 1000, Window: time.Second, Algorithm: policy.GCRA},
		policy.Rule{Name: "warm", Limit: 1000, Window: time.Second, Algorithm: policy.TokenBucket, WarmUp: time.Second},
		policy.Rule{Name: "log", Limit: 1000, Window: time.Second, Algorithm: policy.SlidingLog},
	)
	ctx := context.Background()
	for _, name := range []string{"gcra", "warm", "log"} {
		for i := 0; i < 1000; i++ {
			_, _ = l.Allow(ctx, name, "hot")
		}
		require.Zero(t, testing.AllocsPerRun(500, func() {
			c.add(int64(time.Millisecond))
			if _, err := l.Allow(ctx, name, "hot"); err != nil {
				panic(err)
			}
		}), name)
	}
}

// TestWindowAlgorithmsAreShared: the sliding, weighted and fixed windows are
// accepted in every mode with a store, and count in it.
func TestWindowAlgorithmsAreShared(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	for _, a := range []policy.Algorithm{policy.SlidingWindow, policy.WeightedWindow, policy.FixedWindow} {
		for _, mode := range []policy.Mode{policy.ModeDefault, policy.Eventual, policy.Strict, policy.Local} {
			t.Run(fmt.Sprintf("%v/%v", a, mode), func(t *testing.T) {
				t.Parallel()
				rule := policy.Rule{Name: "r", Limit: 10, Window: time.Second, Algorithm: a, Mode: mode}
				l, err := sluice.New(sluice.Options{Redis: client, Prefix: fmt.Sprintf("shared-%d-%d", a, mode)}, rule)
				require.NoError(t, err)
				d, err := l.Allow(context.Background(), "r", "k")
				require.NoError(t, err)
				require.True(t, d.Allowed)
				require.NoError(t, l.Close())
			})
		}
	}
}

// TestWeightedWindowIsWeighted: a WeightedWindow rule built by New counts
// the previous bucket by its overlap with the window, a SlidingWindow rule
// counts it whole. With Precision 1 (one bucket of the window's length) and
// the previous bucket full, the sliding window admits nothing until it ends;
// the weighted one admits again once part of it has slid out: at phase φ of
// the current bucket, ⌊φ·L⌋ units (a fraction more as φ grows).
func TestWeightedWindowIsWeighted(t *testing.T) {
	t.Parallel()
	const limit = 10
	for _, tc := range []struct {
		algo policy.Algorithm
		at   float64 // phase of the next bucket at which the check is made
		want int     // admitted there (after the previous bucket was filled)
	}{
		{policy.SlidingWindow, 0.3, 0},
		{policy.SlidingWindow, 0.75, 0},
		{policy.WeightedWindow, 0.3, 3},  // 10 − ⌈0.7·10⌉ = 3
		{policy.WeightedWindow, 0.75, 7}, // 10 − ⌈0.25·10⌉ = 7
		{policy.FixedWindow, 0.3, limit},
	} {
		t.Run(fmt.Sprintf("%v/%v", tc.algo, tc.at), func(t *testing.T) {
			t.Parallel()
			start := int64(1_800_000_000 * time.Second)
			c := newFakeClock(start)
			rule := policy.Rule{Name: "r", Limit: limit, Window: time.Second, Algorithm: tc.algo}
			if tc.algo != policy.FixedWindow {
				rule.Precision = 1
			}
			l := newAlgoLimiter(t, c, rule)
			ctx := context.Background()
			d, err := l.AllowN(ctx, "r", "k", limit)
			require.NoError(t, err)
			require.True(t, d.Allowed, "an empty window admits its limit")
			c.set(start + int64(time.Second) + int64(tc.at*float64(time.Second)))
			admitted := 0
			for range 2 * limit {
				d, err := l.Allow(ctx, "r", "k")
				require.NoError(t, err)
				if d.Allowed {
					admitted++
				}
			}
			require.Equal(t, tc.want, admitted)
		})
	}
}

// TestWeightedWindowSharedIsWeighted: the same through a store, in the
// Eventual and Strict modes, on the real clock: with the previous bucket
// full, a sliding window admits nothing in the next one and a weighted
// window admits again. A trial whose checks did not all fall in the next
// bucket's second half (a descheduled test) is run again on a fresh key.
func TestWeightedWindowSharedIsWeighted(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	const limit = 100
	win := 2 * time.Second
	if testing.Short() {
		// Each trial waits for two bucket boundaries in real time: -short
		// halves the window (the fill and the 2L checks still get 450 ms each).
		win = time.Second
	}
	for _, algo := range []policy.Algorithm{policy.SlidingWindow, policy.WeightedWindow} {
		for _, mode := range []policy.Mode{policy.Eventual, policy.Strict} {
			t.Run(fmt.Sprintf("%v/%v", algo, mode), func(t *testing.T) {
				t.Parallel()
				rule := policy.Rule{Name: "r", Limit: limit, Window: win, Algorithm: algo, Mode: mode, Precision: 1}
				l, err := sluice.New(sluice.Options{Redis: client, Prefix: fmt.Sprintf("weighted-%d-%d", algo, mode)}, rule)
				require.NoError(t, err)
				t.Cleanup(func() { _ = l.Close() })
				ctx := context.Background()
				for trial := 0; ; trial++ {
					key := fmt.Sprint("k", trial)
					// Fill a bucket early in it, check in the next one's second half.
					bucket := time.Now().Truncate(win).Add(win)
					time.Sleep(time.Until(bucket.Add(win / 20)))
					d, err := l.AllowN(ctx, "r", key, limit)
					require.NoError(t, err)
					filled := d.Allowed && time.Now().Before(bucket.Add(win/2))
					time.Sleep(time.Until(bucket.Add(win + win/2)))
					admitted := 0
					for range 2 * limit {
						d, err := l.Allow(ctx, "r", key)
						require.NoError(t, err)
						if d.Allowed {
							admitted++
						}
					}
					if !filled || time.Now().After(bucket.Add(2*win-win/20)) {
						require.Less(t, trial, 2, "three trials disturbed")
						continue
					}
					if algo == policy.SlidingWindow {
						require.Zero(t, admitted, "the previous bucket counts whole")
					} else {
						require.Positive(t, admitted, "the previous bucket counts by its overlap")
						require.Less(t, admitted, limit)
					}
					return
				}
			})
		}
	}
}
