package httplimit_test

import (
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// TestReloadKeepsRoutedRules: while a middleware lives, a SetRules that
// leaves out a rule one of its routes checks is refused (naming the
// route), and the route goes on limiting; a middleware that failed to
// build holds nothing, and one that is garbage lets the rule go.
func TestReloadKeepsRoutedRules(t *testing.T) {
	t.Parallel()
	api := policy.Rule{Name: "api", Limit: 1, Window: time.Minute}
	admin := policy.Rule{Name: "admin", Limit: 1, Window: time.Minute}
	other := policy.Rule{Name: "other", Limit: 1, Window: time.Minute}
	lim := newLimiter(t, api, admin, other)

	// A failed build (its second route names no rule) releases the first
	// route's hold.
	_, err := httplimit.New(httplimit.Config{Limiter: lim, ErrorMode: httplimit.ErrorReject, Routes: []httplimit.Route{
		{Pattern: "/api/", Rules: []httplimit.Rule{{Name: "other"}}},
		{Pattern: "/x/", Rules: []httplimit.Rule{{Name: "missing"}}},
	}})
	require.Error(t, err)

	url, c := limited(t, lim, httplimit.Config{Routes: []httplimit.Route{
		{Pattern: "/api/", Rules: []httplimit.Rule{{Name: "api"}}},
		{Pattern: "/admin/", Rules: []httplimit.Rule{{Name: "admin"}, {Name: "api"}}},
	}})
	resp, _ := get(t, c, url+"/api/", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	err = lim.SetRules(admin, other)
	require.ErrorIs(t, err, sluice.ErrRuleInUse)
	assert.Contains(t, err.Error(), `"api" (checked by httplimit route "/admin/", httplimit route "/api/")`)
	resp, _ = get(t, c, url+"/api/", nil)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the route still limits, on its counts")
	require.NoError(t, lim.SetRules(api, admin), `"other" is free: its route was never built`)

	// A middleware nobody holds any more releases its rules at a garbage
	// collection.
	lim2 := newLimiter(t, api, other)
	func() {
		mw, err := httplimit.New(httplimit.Config{Limiter: lim2, ErrorMode: httplimit.ErrorReject, Routes: oneRoute("api")})
		require.NoError(t, err)
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }))
		require.ErrorIs(t, lim2.SetRules(other), sluice.ErrRuleInUse)
		runtime.KeepAlive(h)
	}()
	require.Eventually(t, func() bool {
		runtime.GC()
		return lim2.SetRules(other) == nil
	}, 10*time.Second, 10*time.Millisecond)
}
