package policy_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/policy"
)

func TestValidateInFlight(t *testing.T) {
	t.Parallel()
	inflight := func(f func(r *policy.Rule)) policy.Rule {
		r := policy.Rule{Name: "uploads", Limit: 20, InFlight: true}
		f(&r)
		return r
	}
	tests := []struct {
		name string
		rule policy.Rule
		want string // "" for a valid rule; else a substring of the error
	}{
		{"plain", inflight(func(*policy.Rule) {}), ""},
		{"local", inflight(func(r *policy.Rule) { r.Mode = policy.Local }), ""},
		{"strict", inflight(func(r *policy.Rule) { r.Mode = policy.Strict }), ""},
		{"max limit", inflight(func(r *policy.Rule) { r.Limit = policy.MaxLimit }), ""},
		{"zero limit", inflight(func(r *policy.Rule) { r.Limit = 0 }), "Limit 0 is out of range"},
		{"limit too large", inflight(func(r *policy.Rule) { r.Limit = policy.MaxLimit + 1 }), "out of range"},
		{"window", inflight(func(r *policy.Rule) { r.Window = time.Second }), "has no window"},
		{"algorithm", inflight(func(r *policy.Rule) { r.Algorithm = policy.GCRA }), "no Algorithm"},
		{"burst", inflight(func(r *policy.Rule) { r.Burst = 3 }), "no Algorithm, Precision, Burst"},
		{"shadow", inflight(func(r *policy.Rule) { r.Shadow = true }), "takes no Soft"},
		{"deny", inflight(func(r *policy.Rule) { r.Deny = true }), "takes no Soft"},
		{"overrides", inflight(func(r *policy.Rule) { r.Overrides = []policy.Override{{Tier: "t", Keys: []string{"k"}, Limit: 1}} }), "Overrides"},
		{"eventual", inflight(func(r *policy.Rule) { r.Mode = policy.Eventual }), "Mode Eventual is refused"},
		{"unknown mode", inflight(func(r *policy.Rule) { r.Mode = 9 }), "unknown Mode 9"},
		{"bad name", inflight(func(r *policy.Rule) { r.Name = "a:b" }), "Name has"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.rule.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, policy.ErrInvalidRule)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestLoadInFlight(t *testing.T) {
	t.Parallel()
	const file = `rules:
  - name: api
    limit: 100
    window: 1s
  - name: uploads
    limit: 20
    in_flight: true
    mode: local
`
	c, err := policy.Load(strings.NewReader(file))
	require.NoError(t, err)
	require.Len(t, c.Rules, 2)
	assert.Equal(t, policy.Rule{Name: "uploads", Limit: 20, InFlight: true, Mode: policy.Local}, c.Rules[1])
	assert.False(t, c.Rules[0].InFlight)

	// Encode writes it back without a window, and Load reads the same rules.
	var buf bytes.Buffer
	require.NoError(t, c.Encode(&buf))
	assert.Contains(t, buf.String(), "in_flight: true")
	back, err := policy.Load(&buf)
	require.NoError(t, err)
	assert.Equal(t, c.Rules, back.Rules)

	_, err = policy.Load(strings.NewReader("rules:\n  - name: uploads\n    limit: 20\n    window: 1s\n    in_flight: true\n"))
	require.ErrorIs(t, err, policy.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "has no window")
}
