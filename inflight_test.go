package sluice_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// uploads is an InFlight rule of limit n.
func uploads(n int64, mode policy.Mode) policy.Rule {
	return policy.Rule{Name: "uploads", Limit: n, InFlight: true, Mode: mode}
}

func TestAcquireLocal(t *testing.T) {
	t.Parallel()
	l, err := sluice.New(sluice.Options{}, uploads(3, policy.ModeDefault), rateRule("api", 10))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()

	var held []sluice.Slot
	for want := int64(2); want >= 0; want-- {
		s, d, err := l.Acquire(ctx, "uploads", "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
		assert.Equal(t, int64(3), d.Limit)
		assert.Equal(t, want, d.Remaining)
		assert.True(t, s.Held())
		held = append(held, s)
	}
	s, d, err := l.Acquire(ctx, "uploads", "k")
	require.NoError(t, err, "a full key is a denial, not an error")
	assert.False(t, d.Allowed)
	assert.False(t, s.Held())
	s.Release() // the zero Slot holds nothing

	other, d, err := l.Acquire(ctx, "uploads", "other")
	require.NoError(t, err)
	assert.True(t, d.Allowed, "keys are limited apart")
	other.Release()
	assert.Zero(t, sluice.InFlightHeld(l, "uploads", "other"))

	// A release gives one slot back, once, whichever copy releases it.
	cp := held[0]
	held[0].Release()
	cp.Release()
	held[0].Release()
	assert.False(t, cp.Held())
	assert.Equal(t, int64(2), sluice.InFlightHeld(l, "uploads", "k"))
	again, d, err := l.Acquire(ctx, "uploads", "k")
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	cp.Release() // a stale copy does not release the holder's next slot
	assert.True(t, again.Held())
	assert.Equal(t, int64(3), sluice.InFlightHeld(l, "uploads", "k"))

	require.NoError(t, l.Close())
	_, _, err = l.Acquire(ctx, "uploads", "k")
	require.ErrorIs(t, err, sluice.ErrClosed)
	for _, s := range append(held, again) {
		s.Release() // safe after Close
	}
	assert.Zero(t, sluice.InFlightHeld(l, "uploads", "k"))
}

func TestAcquireErrors(t *testing.T) {
	t.Parallel()
	l, err := sluice.New(sluice.Options{MaxKeyLength: 8}, uploads(3, policy.Local), rateRule("api", 10))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	tests := []struct {
		name, rule, key string
		want            error
		msg             string
	}{
		{"unknown rule", "nope", "k", sluice.ErrUnknownRule, `"nope"`},
		{"a rate rule", "api", "k", sluice.ErrUnknownRule, "use Allow for rates"},
		{"key too long", "uploads", strings.Repeat("k", 9), sluice.ErrKeyTooLong, "9 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, d, err := l.Acquire(context.Background(), tt.rule, tt.key)
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.msg)
			assert.False(t, d.Allowed)
			assert.False(t, s.Held())
		})
	}
	_, err = l.Allow(context.Background(), "uploads", "k")
	require.ErrorIs(t, err, sluice.ErrUnknownRule, "Allow does not take an InFlight rule")
}

func TestNewInFlightErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		rules []policy.Rule
		msg   string
	}{
		{"strict without a store", []policy.Rule{uploads(3, policy.Strict)}, "needs a store"},
		{"eventual", []policy.Rule{uploads(3, policy.Eventual)}, "Mode Eventual is refused"},
		{"a window", []policy.Rule{{Name: "uploads", Limit: 3, InFlight: true, Window: 1e9}}, "has no window"},
		{"a name used twice", []policy.Rule{uploads(3, policy.Local), {Name: "uploads", Limit: 3, Window: 1e9}}, "duplicate rule name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := sluice.New(sluice.Options{}, tt.rules...)
			require.ErrorIs(t, err, policy.ErrInvalidRule)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

// Goroutines that hold their slots a while never hold more than the limit
// at once, and leave nothing held.
func TestAcquireLocalConcurrent(t *testing.T) {
	t.Parallel()
	const limit = 5
	l, err := sluice.New(sluice.Options{}, uploads(limit, policy.Local))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	var in, most, admitted atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 500 {
				s, d, err := l.Acquire(context.Background(), "uploads", "k")
				if err != nil || !d.Allowed {
					continue
				}
				n := in.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				admitted.Add(1)
				in.Add(-1)
				s.Release()
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(limit))
	assert.Positive(t, admitted.Load())
	assert.Zero(t, sluice.InFlightHeld(l, "uploads", "k"))
}

// SetRules keeps a rule's slots and applies its new Limit to the next
// Acquire.
func TestSetRulesInFlight(t *testing.T) {
	t.Parallel()
	l, err := sluice.New(sluice.Options{}, uploads(2, policy.Local), rateRule("api", 10))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	a, _, _ := l.Acquire(ctx, "uploads", "k")
	b, _, _ := l.Acquire(ctx, "uploads", "k")
	require.True(t, a.Held() && b.Held())

	require.NoError(t, l.SetRules(uploads(3, policy.Local), rateRule("api", 10)))
	c, d, err := l.Acquire(ctx, "uploads", "k")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(3), d.Limit)
	_, d, _ = l.Acquire(ctx, "uploads", "k")
	assert.False(t, d.Allowed, "the two slots held before count")

	require.NoError(t, l.SetRules(rateRule("api", 10)))
	_, _, err = l.Acquire(ctx, "uploads", "k")
	require.ErrorIs(t, err, sluice.ErrUnknownRule)
	for _, s := range []sluice.Slot{a, b, c} {
		s.Release() // a rule that left still takes its slots back
	}
}

// rateRule is a rate rule of limit n per second.
func rateRule(name string, n int64) policy.Rule {
	return policy.Rule{Name: name, Limit: n, Window: time.Second}
}
