package layer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// TestNewRuleSetRefuses: no limiter, no rule, an unknown rule, too many,
// an InFlight rule; and a check with a key per rule only.
func TestNewRuleSetRefuses(t *testing.T) {
	t.Parallel()
	lim, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "api", Limit: 5, Window: time.Minute},
		policy.Rule{Name: "one", Limit: 1, InFlight: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{nil, "no Rules"},
		{[]string{"nope"}, `"nope"`},
		{[]string{"one"}, "InFlight rule"},
		{[]string{"api", "api", "api", "api", "api", "api", "api", "api", "api"}, "at most 8"},
	} {
		_, err := NewRuleSet(lim, tc.names...)
		require.ErrorContains(t, err, tc.want)
	}
	_, err = NewRuleSet(nil, "api")
	require.Error(t, err)
	rs, err := NewRuleSet(lim, "api")
	require.NoError(t, err)
	_, err = rs.Check(context.Background(), []string{"a", "b"}, 1, AllFields)
	require.ErrorContains(t, err, "2 keys for 1 rules")
}

// TestFieldNames pins the fields' names on the wire: HTTP's canonical
// header names and gRPC's lower-case metadata keys.
func TestFieldNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, [NumFields]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After"}, FieldNames)
	require.Equal(t, [NumFields]string{"ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after"}, MetadataNames)
}
