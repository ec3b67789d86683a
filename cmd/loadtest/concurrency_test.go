package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// goodConc is a run of the concurrency profile that keeps every promise.
func goodConc() concMeasured {
	m := concMeasured{
		Limit: 20, Instances: 4, Workers: 16, Duration: 5 * time.Second, TTL: time.Second,
		Samples: 900, MaxHeld: [concKeys]int64{20, 12, 11, 12, 10}, StoreMax: [concKeys]int64{20, 12, 11, 12, 10},
		Admitted: 4000, Denied: [concKeys]int64{700}, Polls: 230,
		KilledHeld: 6, Abandoned: 6, LeaseEnd: 990 * time.Millisecond, FreedAfter: time.Second,
		PreLimit: 18, PostLimit: [2]float64{10, 10.5}, FollowAfter: 500 * time.Millisecond,
	}
	m.Offered[adaptive.Critical], m.Offered[adaptive.Default], m.Offered[adaptive.Sheddable] = 1000, 2000, 2000
	m.Shed[adaptive.Critical], m.Shed[adaptive.Default], m.Shed[adaptive.Sheddable] = 150, 800, 1300
	m.FirstShed[adaptive.Critical], m.FirstShed[adaptive.Default], m.FirstShed[adaptive.Sheddable] = 2*time.Second, time.Second, 70*time.Millisecond
	return m
}

// TestConcurrencyVerdict: each promise of the verdict fails when the
// measurement it rests on says so; a fleet over its limit while the store
// did not answer is the store's, not a broken promise.
func TestConcurrencyVerdict(t *testing.T) {
	t.Parallel()
	m := goodConc()
	cs, ok := m.verdict()
	require.True(t, ok, "%+v", cs)
	for _, c := range []struct {
		name   string
		change func(m *concMeasured)
		ok     bool
	}{
		{"over the limit", func(m *concMeasured) { m.MaxHeld[2] = 21 }, false},
		{"over the limit, the store silent", func(m *concMeasured) { m.MaxHeld[2], m.Fallback = 21, 3 }, true},
		{"no sample", func(m *concMeasured) { m.Samples = 0 }, false},
		{"hot key below its limit", func(m *concMeasured) { m.MaxHeld[0] = 19 }, false},
		{"nothing held by the killed instance", func(m *concMeasured) { m.KilledHeld = 0 }, false},
		{"its leases renewed after the kill", func(m *concMeasured) { m.LeaseEnd = 1300 * time.Millisecond }, false},
		{"its leases never lapsed", func(m *concMeasured) { m.FreedAfter = -1 }, false},
		{"a lease left", func(m *concMeasured) { m.LeftMembers = 1 }, false},
		{"limit not lower after the step", func(m *concMeasured) { m.PostLimit = [2]float64{17, 17} }, false},
		{"limit not settled", func(m *concMeasured) { m.PostLimit = [2]float64{8, 12} }, false},
		{"critical shed more than sheddable", func(m *concMeasured) { m.Shed[adaptive.Critical] = 900 }, false},
		{"critical shed first", func(m *concMeasured) { m.FirstShed[adaptive.Critical] = time.Millisecond }, false},
		{"nothing shed", func(m *concMeasured) { m.Shed = [adaptive.NumPriorities]int64{} }, false},
		{"an Acquire error", func(m *concMeasured) { m.Errors = 1 }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := goodConc()
			c.change(&m)
			cs, ok := m.verdict()
			assert.Equal(t, c.ok, ok, "%+v", cs)
		})
	}
}

// TestParseFlagsConcurrency: the profile is named, listed in the usage, and
// needs an instance to kill.
func TestParseFlagsConcurrency(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"-profile", "concurrency"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, []string{Concurrency}, o.Profiles)
	_, err = parseFlags([]string{"-profile", "concurrency", "-instances", "1"}, &bytes.Buffer{})
	assert.ErrorContains(t, err, "-instances 2 or more")
	var usage bytes.Buffer
	require.Equal(t, 0, run([]string{"-h"}, &bytes.Buffer{}, &usage))
	assert.Contains(t, usage.String(), Concurrency)
}

// TestRunConcurrency runs the profile for 2 s on 3 instances against a
// throwaway redis-server: what it measured is data (the slots held and the
// store's leases sampled, the killed instance's leases seen, the adaptive
// limits sampled), its verdict is computed from it (a measurement changed
// changes the verdict), and the store holds no lease at the end. The
// verdict itself, which depends on the machine's load, is not asserted.
func TestRunConcurrency(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	o, err := parseFlags([]string{"-redis", srv.Addr(), "-profile", "concurrency", "-duration", "2s", "-instances", "3", "-workers", "8", "-timeout", "1s"}, &bytes.Buffer{})
	require.NoError(t, err)
	target, err := store.Parse(srv.Addr())
	require.NoError(t, err)
	m, err := measureConcurrency(context.Background(), o, target, "lt:conctest")
	require.NoError(t, err)

	assert.Positive(t, m.Samples)
	assert.Positive(t, m.Polls)
	assert.Positive(t, m.Admitted)
	assert.Positive(t, m.MaxHeld[0])
	assert.LessOrEqual(t, m.StoreMax[0], int64(concLimit), "the store's script never holds more than the limit")
	assert.Positive(t, m.PreLimit, "adaptive limits sampled before the step")
	assert.Positive(t, m.PostLimit[1], "and after it")
	assert.Positive(t, m.Offered[adaptive.Critical]+m.Offered[adaptive.Sheddable])
	assert.Zero(t, m.LeftMembers, "no lease left in the store")
	n, err := srv.Client(t).Keys(context.Background(), "lt:conctest:inflight:*").Result()
	require.NoError(t, err)
	assert.Empty(t, n)

	cs, ok := m.verdict()
	require.Len(t, cs, 7)
	for _, c := range cs {
		assert.NotEmpty(t, c.text)
	}
	assert.Contains(t, cs[0].text, ": "+itoa(max(m.MaxHeld[0], m.MaxHeld[1], m.MaxHeld[2], m.MaxHeld[3], m.MaxHeld[4]))+" (limit 20")
	bad := *m
	bad.MaxHeld[1], bad.Fallback = concLimit+1, 0
	_, badOK := bad.verdict()
	assert.False(t, badOK, "one slot over the limit fails the verdict")
	r := concResult(m)
	assert.Equal(t, ok, r.OK)
	assert.True(t, strings.HasPrefix(r.Lines[2], "✓ ") || strings.HasPrefix(r.Lines[2], "✗ "), r.Lines[2])
}
