package sluice_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// TestInFlightRuleAndRequire checks that Rule describes an InFlight rule
// and that Require holds one against a reload that leaves it out or
// makes it a rate rule.
func TestInFlightRuleAndRequire(t *testing.T) {
	t.Parallel()
	rate := policy.Rule{Name: "rate", Limit: 5, Window: time.Minute}
	slots := policy.Rule{Name: "slots", Limit: 3, InFlight: true}
	l, err := sluice.New(sluice.Options{}, rate, slots)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })

	pr, ok := l.Rule("slots")
	require.True(t, ok)
	assert.Equal(t, policy.Rule{Name: "slots", Limit: 3, Mode: policy.Local, InFlight: true}, pr)

	release, err := l.Require("test", "slots")
	require.NoError(t, err)
	assert.ErrorIs(t, l.SetRules(rate), sluice.ErrRuleInUse)
	assert.ErrorIs(t, l.SetRules(rate, policy.Rule{Name: "slots", Limit: 3, Window: time.Minute}), sluice.ErrRuleInUse, "a rate rule in its place")
	slots.Limit = 4
	require.NoError(t, l.SetRules(rate, slots), "a changed limit is not a rule left out")
	pr, _ = l.Rule("slots")
	assert.Equal(t, int64(4), pr.Limit)
	release()
	require.NoError(t, l.SetRules(rate))
	_, ok = l.Rule("slots")
	assert.False(t, ok)
	_, err = l.Require("test", "slots")
	assert.ErrorIs(t, err, sluice.ErrUnknownRule)
}
