package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/sftest"
	"github.com/sluicehq/sluice/policy"
)

// sfList parses a header as an RFC 9651 List of Items named by sf-strings
// and returns the items by name, in order.
func sfList(t *testing.T, h http.Header, name string) ([]string, map[string]httpsfv.Item) {
	t.Helper()
	return sftest.Items(t, name, h.Values(name))
}

// TestLayered: two rules on one route, one item each in both fields; the
// rule that denies uses up nothing of the other.
func TestLayered(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t,
		policy.Rule{Name: "burst", Limit: 2, Window: time.Minute},
		policy.Rule{Name: "hourly", Limit: 5, Window: time.Hour},
	)
	url, c := limited(t, lim, httplimit.Config{Routes: []httplimit.Route{{
		Pattern: "/", Rules: []httplimit.Rule{{Name: "burst"}, {Name: "hourly"}},
	}}})
	for i, want := range []int{200, 200, 429, 429} {
		resp, body := get(t, c, url, nil)
		require.Equal(t, want, resp.StatusCode, "request %d", i+1)
		names, pol := sfList(t, resp.Header, "RateLimit-Policy")
		assert.Equal(t, []string{"burst", "hourly"}, names)
		assert.EqualValues(t, 2, param(t, pol["burst"], "q"))
		assert.EqualValues(t, 3600, param(t, pol["hourly"], "w"))
		names, rl := sfList(t, resp.Header, "RateLimit")
		assert.Equal(t, []string{"burst", "hourly"}, names)
		admitted := min(i+1, 2)
		assert.EqualValues(t, 2-admitted, param(t, rl["burst"], "r"), "request %d", i+1)
		assert.EqualValues(t, 5-admitted, param(t, rl["hourly"], "r"), "request %d: denials use up nothing of the hourly rule", i+1)
		assert.Equal(t, "2", resp.Header.Get("X-RateLimit-Limit"), "the legacy headers speak of the binding rule")
		if want == 429 {
			p := checkProblem(t, resp, body)
			assert.Contains(t, p["detail"], `"burst"`)
		}
	}
}

// TestShadow: a shadow rule lets everything through and says, in both
// fields, that it is not enforced and when it would have denied.
func TestShadow(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "trial", Limit: 1, Window: time.Minute, Shadow: true})
	url, c := limited(t, lim, httplimit.Config{Routes: oneRoute("trial")})
	for i := range 3 {
		resp, _ := get(t, c, url, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: a shadow rule never denies", i+1)
		pol := sfItem(t, resp.Header, "RateLimit-Policy")
		v, ok := pol.Params.Get("sluice-shadow")
		assert.True(t, ok && v == true, "the policy says it is a dry run")
		rl := sfItem(t, resp.Header, "RateLimit")
		v, ok = rl.Params.Get("sluice-shadow")
		assert.Equal(t, i > 0, ok && v == true, "request %d: would have been denied", i+1)
		assert.Empty(t, resp.Header.Get("Retry-After"))
		want, err := httplimit.RateLimitField("trial", sluice.Decision{
			Allowed: true, Remaining: param(t, rl, "r"), ResetAfter: time.Duration(param(t, rl, "t")) * time.Second,
			RetryAfter: map[bool]time.Duration{true: time.Second}[i > 0],
		})
		require.NoError(t, err)
		assert.Equal(t, want, resp.Header.Get("RateLimit"), "byte for byte httpsfv's")
	}
}

// TestLayeredShadow: a shadow layer never denies, and is flagged only
// when it would have.
func TestLayeredShadow(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t,
		policy.Rule{Name: "enforced", Limit: 3, Window: time.Minute},
		policy.Rule{Name: "trial", Limit: 1, Window: time.Minute, Shadow: true},
	)
	url, c := limited(t, lim, httplimit.Config{Routes: []httplimit.Route{{
		Pattern: "/", Rules: []httplimit.Rule{{Name: "enforced"}, {Name: "trial"}},
	}}})
	for i, want := range []int{200, 200, 200, 429} {
		resp, _ := get(t, c, url, nil)
		require.Equal(t, want, resp.StatusCode, "request %d", i+1)
		_, rl := sfList(t, resp.Header, "RateLimit")
		_, flagged := rl["trial"].Params.Get("sluice-shadow")
		_, enforcedFlagged := rl["enforced"].Params.Get("sluice-shadow")
		assert.False(t, enforcedFlagged)
		if i == 1 || i == 2 {
			assert.True(t, flagged, "request %d: the trial rule would have denied", i+1)
		}
	}
}
