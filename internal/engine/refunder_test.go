package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/policy"
)

// TestRefunders: the engines whose admissions can be taken back are
// Refunders, and only those: not a WarmUp's packed state, nor the Strict
// TokenBucket, GCRA and SlidingLog, which Limiter.AllowAll checks last.
func TestRefunders(t *testing.T) {
	t.Parallel()
	rule := func(a policy.Algorithm, m policy.Mode) policy.Rule {
		return policy.Rule{Name: "r", Limit: 10, Window: time.Second, Algorithm: a, Mode: m}
	}
	warm := rule(policy.TokenBucket, policy.Local)
	warm.WarmUp = time.Second
	for _, tc := range []struct {
		name string
		rule policy.Rule
		want bool
	}{
		{"local sliding window", rule(policy.SlidingWindow, policy.Local), true},
		{"eventual sliding window", rule(policy.SlidingWindow, policy.Eventual), true},
		{"strict sliding window", rule(policy.SlidingWindow, policy.Strict), true},
		{"eventual fixed window", rule(policy.FixedWindow, policy.Eventual), true},
		{"local gcra", rule(policy.GCRA, policy.Local), true},
		{"eventual token bucket", rule(policy.TokenBucket, policy.Eventual), true},
		{"local sliding log", rule(policy.SlidingLog, policy.Local), true},
		{"deny", policy.Rule{Name: "r", Deny: true, Window: time.Second}, true},
		{"warm-up token bucket", warm, false},
		{"strict gcra", rule(policy.GCRA, policy.Strict), false},
		{"strict token bucket", rule(policy.TokenBucket, policy.Strict), false},
		{"strict sliding log", rule(policy.SlidingLog, policy.Strict), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ok := newEngine(t, tc.rule, &clock{t: 1}, policy.FailLocal).(engine.Refunder)
			assert.Equal(t, tc.want, ok)
		})
	}
}
