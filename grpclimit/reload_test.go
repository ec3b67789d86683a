package grpclimit_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/policy"
)

// TestReloadKeepsMethodRules: while an interceptor is reachable, a
// SetRules that leaves out a rule it checks is refused.
func TestReloadKeepsMethodRules(t *testing.T) {
	t.Parallel()
	def := policy.Rule{Name: "default", Limit: 5, Window: time.Minute}
	check := policy.Rule{Name: "check", Limit: 5, Window: time.Minute}
	other := policy.Rule{Name: "other", Limit: 5, Window: time.Minute}
	lim := newLimiter(t, def, check, other)
	unary, err := grpclimit.UnaryServerInterceptor(grpclimit.Config{Limiter: lim, ErrorMode: grpclimit.ErrorReject,
		Rule: "default", Methods: map[string]string{"/grpc.health.v1.Health/Check": "check"}})
	require.NoError(t, err)
	for _, set := range [][]policy.Rule{{def, other}, {check, other}} {
		err := lim.SetRules(set...)
		require.ErrorIs(t, err, sluice.ErrRuleInUse)
		assert.Contains(t, err.Error(), "grpclimit interceptor")
	}
	require.NoError(t, lim.SetRules(def, check), "other is free")
	runtime.KeepAlive(unary)
}
