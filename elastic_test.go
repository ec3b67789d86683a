package sluice_test

import (
	"context"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// elasticRules: clients may go from 10 to 50 a minute while the service's
// 100 a minute has room.
var elasticRules = []policy.Rule{
	{Name: "service", Limit: 100, Window: time.Minute},
	{Name: "client", Limit: 10, Window: time.Minute, Ceiling: 50, Capacity: "service"},
	{Name: "deny", Limit: 1, Window: time.Minute},
}

// allowMany checks count requests of key under "client" and returns how
// many were admitted.
func allowMany(t *testing.T, l *sluice.Limiter, key string, count int) int {
	t.Helper()
	admitted := 0
	for range count {
		d, err := l.Allow(context.Background(), "client", key)
		require.NoError(t, err)
		assert.Equal(t, int64(10), d.Limit, "the Decision speaks of Limit")
		if d.Allowed {
			admitted++
		} else {
			assert.Positive(t, d.RetryAfter)
		}
	}
	return admitted
}

// TestElastic: a lone heavy client gets the spare capacity up to its
// Ceiling, and loses it the moment others fill the capacity; a client within
// its Limit is never denied by the capacity.
func TestElastic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		before map[string]int // others' requests first
		heavy  int            // admitted of 60 requests of the heavy client
		after  map[string]int // others' requests after, and what they get
		more   int            // admitted of 10 more of the heavy client after them
	}{
		{name: "alone", heavy: 50, more: 0},
		{name: "busy from the start", before: map[string]int{"b1": 10, "b2": 10, "b3": 10, "b4": 10, "b5": 10, "b6": 10, "b7": 10, "b8": 10, "b9": 10}, heavy: 10},
		{name: "others arrive", heavy: 50, after: map[string]int{"b1": 10, "b2": 10, "b3": 10, "b4": 10, "b5": 10, "b6": 10}, more: 0},
		{name: "room left", heavy: 50, before: map[string]int{"b1": 10, "b2": 10}, after: map[string]int{"b3": 5}, more: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newFakeClock(1_800_000_000 * int64(time.Second))
			l := newAlgoLimiter(t, c, elasticRules...)
			for k, n := range tc.before {
				assert.Equal(t, n, allowMany(t, l, k, n), "%s within its Limit", k)
			}
			heavy := allowMany(t, l, "heavy", 60)
			assert.Equal(t, tc.heavy, heavy)
			for k, n := range tc.after {
				assert.Equal(t, n, allowMany(t, l, k, n), "%s within its Limit, even with the capacity full", k)
			}
			assert.Equal(t, tc.more, allowMany(t, l, "heavy", 10))
		})
	}
}

// TestElasticRemaining: Remaining counts down to 0 at Limit and stays 0 in
// the elastic band.
func TestElasticRemaining(t *testing.T) {
	t.Parallel()
	c := newFakeClock(1_800_000_000 * int64(time.Second))
	l := newAlgoLimiter(t, c, elasticRules...)
	var got []int64
	for range 12 {
		d, err := l.Allow(context.Background(), "client", "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
		got = append(got, d.Remaining)
	}
	assert.Equal(t, []int64{9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0}, got)
	s, err := l.Peek("service"+sluice.MeterSuffix, sluice.CapacityKey)
	require.NoError(t, err)
	assert.Equal(t, int64(200-12), s.Remaining, "every admission counts on the capacity's meter")
	s, err = l.Peek("service", "k")
	require.NoError(t, err)
	assert.Equal(t, int64(100), s.Remaining, "the capacity rule itself is untouched")
}

// TestElasticAllowAll: a denial by another check takes back the elastic
// rule's admission and its capacity's.
func TestElasticAllowAll(t *testing.T) {
	t.Parallel()
	c := newFakeClock(1_800_000_000 * int64(time.Second))
	l := newAlgoLimiter(t, c, elasticRules...)
	ctx := context.Background()
	for i := range 5 {
		d, err := l.AllowAll(ctx, 1, sluice.Check{Rule: "client", Key: "k"}, sluice.Check{Rule: "deny", Key: "k"})
		require.NoError(t, err)
		assert.Equal(t, i == 0, d.Allowed)
	}
	s, err := l.Peek("service"+sluice.MeterSuffix, sluice.CapacityKey)
	require.NoError(t, err)
	assert.Equal(t, int64(199), s.Remaining)
	k, err := l.Peek("client", "k")
	require.NoError(t, err)
	assert.Equal(t, int64(9), k.Remaining)
}

// TestElasticValidation: each mistake is refused with what to do.
func TestElasticValidation(t *testing.T) {
	t.Parallel()
	service := policy.Rule{Name: "service", Limit: 100, Window: time.Minute}
	for _, tc := range []struct {
		rule policy.Rule
		says string
	}{
		{policy.Rule{Name: "c", Limit: 10, Window: time.Minute, Ceiling: 5, Capacity: "service"}, "Ceiling 5 is below Limit 10"},
		{policy.Rule{Name: "c", Limit: 10, Window: time.Minute, Ceiling: 50}, "without a Capacity"},
		{policy.Rule{Name: "c", Limit: 10, Window: time.Minute, Capacity: "service"}, "without a Ceiling"},
		{policy.Rule{Name: "c", Limit: 10, Window: time.Minute, Ceiling: 50, Capacity: "c"}, "the rule itself"},
		{policy.Rule{Name: "c", Limit: 10, Window: time.Minute, Ceiling: 50, Capacity: "nope"}, `Capacity "nope" is not a rule`},
		{policy.Rule{Name: "c", Limit: 10, Window: time.Minute, Ceiling: 50, Capacity: "service", Soft: 0.1}, "pick one"},
		{policy.Rule{Name: "c", Limit: 10, Window: time.Minute, Ceiling: 50, Capacity: "service", Algorithm: policy.GCRA}, "raise Burst"},
		{policy.Rule{Name: "c", Limit: 10, Window: time.Minute, Ceiling: policy.MaxLimit + 1, Capacity: "service"}, "out of range"},
		{policy.Rule{Name: "c", Limit: 10, Window: time.Minute, Ceiling: 2000, Capacity: "service", Algorithm: policy.SlidingLog}, "Ceiling 2000 as the limit"},
	} {
		t.Run(tc.says, func(t *testing.T) {
			t.Parallel()
			_, err := sluice.New(sluice.Options{}, service, tc.rule)
			require.ErrorIs(t, err, policy.ErrInvalidRule)
			assert.Contains(t, err.Error(), tc.says)
		})
	}
	_, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "a", Limit: 10, Window: time.Minute, Ceiling: 20, Capacity: "b"},
		policy.Rule{Name: "b", Limit: 10, Window: time.Minute, Ceiling: 20, Capacity: "service"},
		service)
	require.ErrorIs(t, err, policy.ErrInvalidRule)
	assert.Contains(t, err.Error(), "itself elastic")
	_, err = sluice.New(sluice.Options{}, append([]policy.Rule{{Name: "service.elastic", Limit: 10, Window: time.Minute}}, elasticRules...)...)
	require.ErrorIs(t, err, policy.ErrInvalidRule)
	assert.Contains(t, err.Error(), "rename it")
}

// TestElasticBusyInLimit: clients within their Limit fill the capacity on
// their own; a heavy client then gets nothing past its Limit, although the
// capacity rule never denied anyone.
func TestElasticBusyInLimit(t *testing.T) {
	t.Parallel()
	c := newFakeClock(1_800_000_000 * int64(time.Second))
	l := newAlgoLimiter(t, c, elasticRules...)
	for i := range 15 { // 150 in-limit requests: 1.5 times the capacity
		assert.Equal(t, 10, allowMany(t, l, fmt.Sprint("b", i), 10))
	}
	assert.Equal(t, 10, allowMany(t, l, "heavy", 60), "held to its Limit")
}

// Elastic throttling: each client may make 10 requests a minute, and up to
// 30 while the service's 40 a minute has room. Alone, a client gets 30;
// once others take the capacity, it is held to its 10.
func ExampleLimiter_AllowN_elastic() {
	limiter, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "service", Limit: 40, Window: time.Minute},
		policy.Rule{Name: "client", Limit: 10, Window: time.Minute, Ceiling: 30, Capacity: "service"},
	)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	burst := func(key string, count int) (admitted int) {
		for range count {
			if d, _ := limiter.Allow(context.Background(), "client", key); d.Allowed {
				admitted++
			}
		}
		return admitted
	}
	fmt.Println("alice alone:", burst("alice", 40))
	fmt.Println("bob:", burst("bob", 10))
	fmt.Println("alice again:", burst("alice", 10))
	fmt.Println("carol, within her limit:", burst("carol", 10))
	// Output:
	// alice alone: 30
	// bob: 10
	// alice again: 0
	// carol, within her limit: 10
}
