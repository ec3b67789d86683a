package sluice_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// TestAllowAllLocalAllOrNothing: two rules on one key, the second tighter;
// once the second denies, the first counts nothing more: its Remaining is
// its Limit less what AllowAll admitted, for every algorithm.
func TestAllowAllLocalAllOrNothing(t *testing.T) {
	t.Parallel()
	for _, alg := range []policy.Algorithm{policy.SlidingWindow, policy.FixedWindow, policy.WeightedWindow, policy.TokenBucket, policy.GCRA, policy.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			c := newFakeClock(1_800_000_000 * int64(time.Second))
			wide := policy.Rule{Name: "wide", Limit: 100, Window: time.Hour, Algorithm: alg}
			tight := policy.Rule{Name: "tight", Limit: 6, Window: time.Hour, Algorithm: alg}
			l := newAlgoLimiter(t, c, wide, tight)
			ctx := context.Background()
			var admitted int64
			for i := range 10 {
				// Both orders: the tight rule denies first or last.
				checks := []sluice.Check{{"wide", "k"}, {"tight", "k"}}
				if i%2 == 1 {
					checks[0], checks[1] = checks[1], checks[0]
				}
				d, err := l.AllowAll(ctx, 2, checks...)
				require.NoError(t, err)
				if d.Allowed {
					admitted += 2
					continue
				}
				assert.Equal(t, int64(6), d.Limit, "the denial is the tight rule's")
				assert.Positive(t, d.RetryAfter)
			}
			assert.Equal(t, int64(6), admitted)
			d, err := l.Peek("wide", "k")
			require.NoError(t, err)
			assert.Equal(t, int64(100-6), d.Remaining, "the denials took nothing from the wide rule")
		})
	}
}

// storeCount sums the bucket counts of rule's key in the store (the fields
// named by bucket index).
func storeCount(t *testing.T, client *redis.Client, prefix, rule, key string) int64 {
	t.Helper()
	ctx := context.Background()
	keys, err := client.Keys(ctx, prefix+":{"+rule+":"+key+"}*").Result()
	require.NoError(t, err)
	var sum int64
	for _, k := range keys {
		for f, v := range client.HGetAll(ctx, k).Val() {
			if f[0] >= '0' && f[0] <= '9' {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				sum += n
			}
		}
	}
	return sum
}

// TestAllowAllSharedAllOrNothing: the same with shared rules, in every
// combination of Eventual and Strict, on a real store: after a Flush the
// store counts for the wide rule exactly what AllowAll admitted, whether
// the admissions it took back were counted locally or by the store.
func TestAllowAllSharedAllOrNothing(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	for _, tc := range []struct{ wide, tight policy.Mode }{
		{policy.Eventual, policy.Eventual},
		{policy.Eventual, policy.Strict},
		{policy.Strict, policy.Eventual},
		{policy.Strict, policy.Strict},
	} {
		name := tc.wide.String() + "-" + tc.tight.String()
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			prefix := "allowall-" + name
			wide := policy.Rule{Name: "wide", Limit: 1000, Window: time.Hour, Mode: tc.wide}
			tight := policy.Rule{Name: "tight", Limit: 40, Window: time.Hour, Mode: tc.tight}
			// A generous Timeout: a reservation that times out is denied
			// (FailLocal), which the counts below allow but the first
			// assertion does not.
			l, err := sluice.New(sluice.Options{Redis: client, Prefix: prefix, SyncInterval: time.Hour, MinInstances: 1, Timeout: 5 * time.Second}, wide, tight)
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			ctx := context.Background()
			var admitted int64
			for i := range 100 {
				checks := []sluice.Check{{"wide", "k"}, {"tight", "k"}}
				if i%2 == 1 {
					checks[0], checks[1] = checks[1], checks[0]
				}
				d, err := l.AllowAll(ctx, 1, checks...)
				require.NoError(t, err)
				if d.Allowed {
					admitted++
				}
			}
			assert.Equal(t, int64(40), admitted)
			require.NoError(t, l.Flush(ctx))
			require.NoError(t, l.Flush(ctx)) // the refunds queued during the first
			assert.Equal(t, admitted, storeCount(t, client, prefix, "wide", "k"), "the store counts only what was admitted")
			assert.Equal(t, admitted, storeCount(t, client, prefix, "tight", "k"))
		})
	}
}

// TestAllowAllDecision: the Decision is the most restrictive one.
func TestAllowAllDecision(t *testing.T) {
	t.Parallel()
	c := newFakeClock(1_800_000_000 * int64(time.Second))
	l := newAlgoLimiter(t, c,
		policy.Rule{Name: "a", Limit: 10, Window: time.Minute},
		policy.Rule{Name: "b", Limit: 5, Window: time.Minute},
		policy.Rule{Name: "shadow", Limit: 1, Window: time.Minute, Shadow: true},
	)
	ctx := context.Background()
	d, err := l.AllowAll(ctx, 1, sluice.Check{"a", "k"}, sluice.Check{"b", "k"})
	require.NoError(t, err)
	assert.Equal(t, sluice.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: d.ResetAfter}, d, "the smallest Remaining")
	// The shadow rule admits its first, then would deny: reported, not denied.
	d, err = l.AllowAll(ctx, 1, sluice.Check{"a", "k"}, sluice.Check{"shadow", "k"})
	require.NoError(t, err)
	assert.False(t, d.Shadowed())
	d, err = l.AllowAll(ctx, 1, sluice.Check{"a", "k"}, sluice.Check{"shadow", "k"})
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.True(t, d.Shadowed())
	assert.Equal(t, int64(1), d.Limit)
	pa, err := l.Peek("a", "k")
	require.NoError(t, err)
	assert.Equal(t, int64(7), pa.Remaining, "a shadow would-be denial does not take back the others")
}

// TestAllowAllBadInput: each mistake is an error that names it.
func TestAllowAllBadInput(t *testing.T) {
	t.Parallel()
	c := newFakeClock(1_800_000_000 * int64(time.Second))
	l := newAlgoLimiter(t, c,
		policy.Rule{Name: "a", Limit: 10, Window: time.Minute},
		policy.Rule{Name: "w1", Limit: 10, Window: time.Minute, Algorithm: policy.GCRA, WarmUp: time.Minute},
		policy.Rule{Name: "w2", Limit: 10, Window: time.Minute, Algorithm: policy.GCRA, WarmUp: time.Minute},
	)
	for _, tc := range []struct {
		name   string
		n      int64
		checks []sluice.Check
		is     error
		says   string
	}{
		{"none", 1, nil, sluice.ErrInvalidChecks, "no checks"},
		{"duplicate", 1, []sluice.Check{{"a", "k"}, {"a", "k"}}, sluice.ErrInvalidChecks, "checks 0 and 1"},
		{"unknown rule", 1, []sluice.Check{{"a", "k"}, {"nope", "k"}}, sluice.ErrUnknownRule, "check 1"},
		{"cost above limit", 11, []sluice.Check{{"a", "k"}}, sluice.ErrInvalidCost, "between 1 and the rule's Limit 10"},
		{"cost zero", 0, []sluice.Check{{"a", "k"}}, sluice.ErrInvalidCost, "cost 0"},
		{"two warm-ups", 1, []sluice.Check{{"w1", "k"}, {"w2", "k"}}, sluice.ErrInvalidChecks, "WarmUp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := l.AllowAll(context.Background(), tc.n, tc.checks...)
			require.ErrorIs(t, err, tc.is)
			assert.Contains(t, err.Error(), tc.says)
			assert.False(t, d.Allowed)
		})
	}
	p, err := l.Peek("a", "k")
	require.NoError(t, err)
	assert.Equal(t, int64(10), p.Remaining, "bad input counts nothing")
}

// TestAllowAllWarmUpLast: a rule with a WarmUp, whose admission cannot be
// taken back, is decided after the others, wherever it is passed.
func TestAllowAllWarmUpLast(t *testing.T) {
	t.Parallel()
	c := newFakeClock(1_800_000_000 * int64(time.Second))
	l := newAlgoLimiter(t, c,
		policy.Rule{Name: "tight", Limit: 2, Window: time.Minute},
		policy.Rule{Name: "warm", Limit: 100, Window: time.Minute, Algorithm: policy.GCRA, WarmUp: time.Minute},
	)
	ctx := context.Background()
	for range 5 {
		_, err := l.AllowAll(ctx, 1, sluice.Check{"warm", "k"}, sluice.Check{"tight", "k"})
		require.NoError(t, err)
	}
	for range 2 { // what the warm rule should have counted: two requests
		d, err := l.Allow(ctx, "warm", "ref")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	got, err := l.Peek("warm", "k")
	require.NoError(t, err)
	want, err := l.Peek("warm", "ref")
	require.NoError(t, err)
	assert.Equal(t, want, got, "only the two admitted requests count against the warm rule")
}

// TestSoftAndShadowAllowN: a soft rule admits Limit·(1+Soft) and speaks of
// Limit; a shadow rule never denies and says when it would have.
func TestSoftAndShadowAllowN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rule      policy.Rule
		admitted  int
		shadowed  int
		remaining []int64 // Remaining of the first checks
	}{
		{policy.Rule{Name: "soft", Limit: 10, Window: time.Minute, Soft: 0.2}, 12, 0, []int64{9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0}},
		{policy.Rule{Name: "soft-gcra", Limit: 10, Window: time.Minute, Algorithm: policy.GCRA, Soft: 0.5}, 15, 0, []int64{9, 8}},
		{policy.Rule{Name: "shadow", Limit: 10, Window: time.Minute, Shadow: true}, 20, 10, []int64{9, 8}},
		{policy.Rule{Name: "both", Limit: 10, Window: time.Minute, Soft: 0.1, Shadow: true}, 20, 9, []int64{9, 8}},
	} {
		t.Run(tc.rule.Name, func(t *testing.T) {
			t.Parallel()
			c := newFakeClock(1_800_000_000 * int64(time.Second))
			l := newAlgoLimiter(t, c, tc.rule)
			var admitted, shadowed int
			for i := range 20 {
				d, err := l.Allow(context.Background(), tc.rule.Name, "k")
				require.NoError(t, err)
				assert.Equal(t, tc.rule.Limit, d.Limit)
				if i < len(tc.remaining) {
					assert.Equal(t, tc.remaining[i], d.Remaining, "check %d", i)
				}
				if d.Allowed {
					admitted++
				}
				if d.Shadowed() {
					shadowed++
					assert.Positive(t, d.RetryAfter)
				}
			}
			assert.Equal(t, tc.admitted, admitted)
			assert.Equal(t, tc.shadowed, shadowed)
		})
	}
}

// TestSoftValidation: Soft must be a non-negative number.
func TestSoftValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		soft float64
		says string
	}{
		{-0.1, "negative"},
		{math.NaN(), "not a number"},
		{math.Inf(1), "not a number"},
		{11, "above 10"},
	} {
		_, err := sluice.New(sluice.Options{}, policy.Rule{Name: "r", Limit: 10, Window: time.Second, Soft: tc.soft})
		require.ErrorIs(t, err, policy.ErrInvalidRule, "Soft %v", tc.soft)
		assert.Contains(t, err.Error(), tc.says)
	}
	_, err := sluice.New(sluice.Options{}, policy.Rule{Name: "r", Limit: 1000, Window: time.Second, Algorithm: policy.SlidingLog, Soft: 0.1})
	require.ErrorIs(t, err, policy.ErrInvalidRule)
	assert.Contains(t, err.Error(), "soft band")
}

// BenchmarkAllowAll: three layered checks, admitted, and a denial by the
// last that takes back the first two; no allocation either way.
func BenchmarkAllowAll(b *testing.B) {
	l, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "s", Limit: policy.MaxLimit, Window: time.Hour},
		policy.Rule{Name: "m", Limit: policy.MaxLimit, Window: time.Hour},
		policy.Rule{Name: "deny", Limit: 1, Window: time.Hour},
	)
	require.NoError(b, err)
	b.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	_, _ = l.Allow(ctx, "deny", "k")
	for _, bc := range []struct {
		name   string
		checks []sluice.Check
	}{
		{"admit3", []sluice.Check{{"s", "k"}, {"m", "k"}, {"s", "k2"}}},
		{"deny3", []sluice.Check{{"s", "k"}, {"m", "k"}, {"deny", "k"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = l.AllowAll(ctx, 1, bc.checks...)
			}
		})
	}
}
