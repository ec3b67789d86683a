package layer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	lim, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "api", Limit: 10, Window: time.Minute},
		policy.Rule{Name: "burst", Limit: 5, Window: time.Second},
		policy.Rule{Name: "reports", Limit: 2, InFlight: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	cases := []struct {
		name   string
		rules  []Rule[string]
		costed bool
		want   Route[string]
		err    string
	}{
		{"rates then slots, keys in that order",
			[]Rule[string]{{Name: "reports", Key: "r"}, {Name: "api", Key: "a"}, {Name: "burst", Key: "b", Own: true}}, false,
			Route[string]{Rates: []string{"api", "burst"}, Slots: []string{"reports"}, Keys: []string{"a", "b", "r"}}, ""},
		{"a rule twice under its own keys", []Rule[string]{{Name: "api", Key: "a"}, {Name: "api", Key: "b", Own: true}}, false,
			Route[string]{Rates: []string{"api", "api"}, Keys: []string{"a", "b"}}, ""},
		{"a rule twice under the default key", []Rule[string]{{Name: "api"}, {Name: "api"}}, false, Route[string]{}, `rule "api" twice under the same key`},
		{"an unknown rule", []Rule[string]{{Name: "nope"}}, false, Route[string]{}, `rule "nope": the limiter has no such rule`},
		{"a Cost on slots alone", []Rule[string]{{Name: "reports"}}, true, Route[string]{}, "a Cost with only InFlight rules"},
		{"a Cost weighs the rates", []Rule[string]{{Name: "reports", Key: "r"}, {Name: "api", Key: "a"}}, true,
			Route[string]{Rates: []string{"api"}, Slots: []string{"reports"}, Keys: []string{"a", "r"}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Split(lim, tc.rules, tc.costed, "request")
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
