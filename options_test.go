package sluice_test

import (
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// TestNewRejects checks that New refuses bad options and rules with an error
// that wraps the right sentinel and says what to change.
func TestNewRejects(t *testing.T) {
	t.Parallel()
	ok := policy.Rule{Name: "api", Limit: 10, Window: time.Second}
	// A client that is never dialled: New fails before it starts anything.
	store := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = store.Close() })
	cases := []struct {
		name  string
		opts  sluice.Options
		rules []policy.Rule
		want  error
		hint  string
	}{
		{"no rules", sluice.Options{}, nil, sluice.ErrInvalidOptions, "at least one"},
		{"duplicate names", sluice.Options{}, []policy.Rule{ok, ok}, policy.ErrInvalidRule, "duplicate"},
		{"empty name", sluice.Options{}, []policy.Rule{{Limit: 1, Window: time.Second}}, policy.ErrInvalidRule, "unique name"},
		{"zero limit", sluice.Options{}, []policy.Rule{{Name: "a", Window: time.Second}}, policy.ErrInvalidRule, "between 1 and"},
		{"negative limit", sluice.Options{}, []policy.Rule{{Name: "a", Limit: -5, Window: time.Second}}, policy.ErrInvalidRule, "between 1 and"},
		{"window under 1ms", sluice.Options{}, []policy.Rule{{Name: "a", Limit: 1, Window: 500 * time.Microsecond}}, policy.ErrInvalidRule, "between 1ms"},
		{"name breaks the key layout", sluice.Options{}, []policy.Rule{{Name: "a{b}", Limit: 1, Window: time.Second}}, policy.ErrInvalidRule, "letters, digits"},
		{"strict without a store", sluice.Options{}, []policy.Rule{{Name: "a", Limit: 1, Window: time.Second, Mode: policy.Strict}}, policy.ErrInvalidRule, "Options.Redis"},
		{"eventual without a store", sluice.Options{}, []policy.Rule{{Name: "a", Limit: 1, Window: time.Second, Mode: policy.Eventual}}, policy.ErrInvalidRule, "Options.Redis"},
		{"budget negative", sluice.Options{ErrorBudget: -0.1}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "(0, 1]"},
		{"budget above 1", sluice.Options{ErrorBudget: 1.5}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "(0, 1]"},
		{"budget NaN", sluice.Options{ErrorBudget: math.NaN()}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "(0, 1]"},
		{"sync interval too short", sluice.Options{SyncInterval: 500 * time.Microsecond}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "at least 1ms"},
		{"sync interval negative", sluice.Options{SyncInterval: -time.Second}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "at least 1ms"},
		{"prefix with a brace", sluice.Options{Prefix: "app{1}"}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "Redis key layout"},
		{"prefix with a space", sluice.Options{Prefix: "my app"}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "Redis key layout"},
		{"prefix too long", sluice.Options{Prefix: string(make([]byte, 65))}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "1 to 64"},
		{"instance id with a colon", sluice.Options{InstanceID: "host:1"}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "letters, digits"},
		{"unknown failure mode", sluice.Options{FailureMode: 9}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "FailLocal"},
		{"negative timeout", sluice.Options{Timeout: -time.Millisecond}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "positive"},
		{"negative max keys", sluice.Options{MaxKeys: -1}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "positive"},
		{"negative max key length", sluice.Options{MaxKeyLength: -1}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "positive"},
		{"negative min instances", sluice.Options{MinInstances: -1}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "fleet size"},
		{"min instances beyond any fleet", sluice.Options{MinInstances: math.MaxInt}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "fleet size"},
		{"budget below one unit", sluice.Options{ErrorBudget: 1e-300}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "policy.Strict"},
		{"timeout under a round trip", sluice.Options{Timeout: time.Nanosecond}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "round trip"},
		{"negative batch size", sluice.Options{BatchSize: -1}, []policy.Rule{ok}, sluice.ErrInvalidOptions, "negative"},
		{"bad rule next to a store", sluice.Options{Redis: store}, []policy.Rule{{Name: "a", Limit: 0, Window: time.Second}}, policy.ErrInvalidRule, "between 1 and"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, err := sluice.New(tc.opts, tc.rules...)
			require.Error(t, err)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.hint)
		})
	}
}

// TestNewDefaults checks that a zero Options is a working local limiter and
// that a rule without a mode is local without a store.
func TestNewDefaults(t *testing.T) {
	t.Parallel()
	l, err := sluice.New(sluice.Options{}, policy.Rule{Name: "api", Limit: 1, Window: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	s := l.Stats()
	assert.Equal(t, int64(1), s.Instances)
	assert.False(t, s.Degraded)
	assert.Zero(t, s.Sync, "no syncer without a store")
}
