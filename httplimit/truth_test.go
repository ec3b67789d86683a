package httplimit_test

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/vclock"
	"github.com/sluicehq/sluice/policy"
)

// clockLimiter returns a local limiter of rules on clock c, closed at
// cleanup.
func clockLimiter(t *testing.T, c *vclock.Clock, rules ...policy.Rule) *sluice.Limiter {
	t.Helper()
	lim, err := sluice.New(sluice.Options{Clock: c}, rules...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	return lim
}

// sfInteger parses a header that must be one RFC 9651 sf-integer item
// (X-RateLimit-*, Retry-After) and returns it.
func sfInteger(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	require.Len(t, h.Values(name), 1, name)
	it, err := httpsfv.UnmarshalItem(h.Values(name))
	require.NoError(t, err, "%s: %q", name, h.Get(name))
	n, ok := it.Value.(int64)
	require.True(t, ok, "%s is an sf-integer: %q", name, h.Get(name))
	return n
}

// xKey keys a request by its X-Key header, as is.
func xKey(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil }

// noRateLimitHeaders checks that h advertises no quota at all.
func noRateLimitHeaders(t *testing.T, h http.Header, at string) {
	t.Helper()
	for _, name := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
		assert.Empty(t, h.Values(name), "%s: %s", at, name)
	}
}

// tieredRule is a rule of algorithm a, limit per window, with a tier of 40
// ("gold"), an Unlimited tier ("vip") and a Deny tier ("bad").
func tieredRule(a policy.Algorithm, limit int64, window time.Duration) policy.Rule {
	return policy.Rule{Name: "api", Limit: limit, Window: window, Algorithm: a, Overrides: []policy.Override{
		{Tier: "gold", Keys: []string{"gold-1"}, Limit: 40},
		{Tier: "vip", Keys: []string{"vip"}, Unlimited: true},
		{Tier: "bad", Keys: []string{"bad"}, Deny: true},
	}}
}

// TestHeadersFollowTiersAndReloads: for every algorithm, every response
// tells its client the limit in force for its key (q, X-RateLimit-Limit,
// and r counted from it) and the window in force: a tier's limit, the
// rule's after a reload. An Unlimited key is told nothing (never r=0); a
// blocked key gets a 403 problem saying why, without a Retry-After. Every
// value is parsed with httpsfv.
func TestHeadersFollowTiersAndReloads(t *testing.T) {
	t.Parallel()
	for _, a := range []policy.Algorithm{policy.SlidingWindow, policy.WeightedWindow, policy.FixedWindow, policy.TokenBucket, policy.GCRA, policy.SlidingLog} {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, tieredRule(a, 20, time.Minute))
			url, c := limited(t, lim, httplimit.Config{Routes: oneRoute("api"), Key: xKey})
			check := func(key string, q, w, r int64) {
				t.Helper()
				resp, _ := get(t, c, url, map[string]string{"X-Key": key})
				at := "key " + key
				require.Equal(t, http.StatusOK, resp.StatusCode, at)
				pol := sfItem(t, resp.Header, "RateLimit-Policy")
				assert.Equal(t, "api", pol.Value, at)
				assert.Equal(t, q, param(t, pol, "q"), at)
				assert.Equal(t, w, param(t, pol, "w"), at)
				rl := sfItem(t, resp.Header, "RateLimit")
				assert.Equal(t, r, param(t, rl, "r"), at)
				assert.Equal(t, q, sfInteger(t, resp.Header, "X-RateLimit-Limit"), at)
				assert.Equal(t, r, sfInteger(t, resp.Header, "X-RateLimit-Remaining"), at)
			}
			check("gold-1", 40, 60, 39)
			check("gold-1", 40, 60, 38)
			check("plain", 20, 60, 19)

			for i := range 3 {
				resp, _ := get(t, c, url, map[string]string{"X-Key": "vip"})
				require.Equal(t, http.StatusOK, resp.StatusCode)
				noRateLimitHeaders(t, resp.Header, "unlimited, request "+strconv.Itoa(i+1))
			}

			resp, body := get(t, c, url, map[string]string{"X-Key": "bad"})
			require.Equal(t, http.StatusForbidden, resp.StatusCode)
			noRateLimitHeaders(t, resp.Header, "blocked")
			p := checkProblem(t, resp, body)
			assert.Equal(t, httplimit.DefaultBlockedProblemType, p["type"])
			assert.Contains(t, p["detail"], `"api"`)

			// A reload of the limit: the new limit; a window keeps its
			// counts, the other algorithms' changed rules start afresh.
			require.NoError(t, lim.SetRules(tieredRule(a, 50, time.Minute)))
			kept := a == policy.SlidingWindow || a == policy.WeightedWindow || a == policy.FixedWindow
			check("plain", 50, 60, map[bool]int64{true: 48, false: 49}[kept])
			check("gold-1", 40, 60, 37) // the tier is unchanged: its counts stay
			// A reload of the window: the new window, on new counts.
			require.NoError(t, lim.SetRules(tieredRule(a, 50, 30*time.Second)))
			check("plain", 50, 30, 49)
			check("gold-1", 40, 30, 39)
		})
	}
}

// TestBlockedIsConfigurable: OnBlocked and BlockedProblemType replace the
// default answer to a blocked client; Deny does not see it.
func TestBlockedIsConfigurable(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, tieredRule(policy.SlidingWindow, 20, time.Minute))
	url, c := limited(t, lim, httplimit.Config{Routes: oneRoute("api"), Key: xKey, BlockedProblemType: "https://example.com/banned"})
	resp, body := get(t, c, url, map[string]string{"X-Key": "bad"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Equal(t, "https://example.com/banned", checkProblem(t, resp, body)["type"])

	var denied atomic.Int64
	url, c = limited(t, lim, httplimit.Config{
		Routes: oneRoute("api"), Key: xKey,
		Deny: func(w http.ResponseWriter, _ *http.Request, _ httplimit.Denial) { denied.Add(1) },
		OnBlocked: func(w http.ResponseWriter, _ *http.Request, d httplimit.Denial) {
			assert.True(t, d.Decision.Blocked())
			assert.Equal(t, "api", d.Rule)
			w.WriteHeader(http.StatusUnavailableForLegalReasons)
		},
	})
	resp, _ = get(t, c, url, map[string]string{"X-Key": "bad"})
	assert.Equal(t, http.StatusUnavailableForLegalReasons, resp.StatusCode)
	assert.Zero(t, denied.Load())

	// A Deny rule blocks every key, layered or not.
	lim = newLimiter(t, policy.Rule{Name: "closed", Deny: true, Window: time.Minute}, policy.Rule{Name: "api", Limit: 5, Window: time.Minute})
	url, c = limited(t, lim, httplimit.Config{Routes: []httplimit.Route{
		{Pattern: "/one", Rules: []httplimit.Rule{{Name: "closed"}}},
		{Pattern: "/two", Rules: []httplimit.Rule{{Name: "api"}, {Name: "closed"}}},
	}})
	for _, path := range []string{"/one", "/two"} {
		resp, body := get(t, c, url+path, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, path)
		assert.Empty(t, resp.Header.Values("Retry-After"), path)
		assert.Empty(t, resp.Header.Values("X-RateLimit-Limit"), path)
		assert.Contains(t, checkProblem(t, resp, body)["detail"], `"closed"`, path)
	}
	resp, _ = get(t, c, url+"/two", nil)
	_, rl := sfList(t, resp.Header, "RateLimit")
	assert.EqualValues(t, 5, param(t, rl["api"], "r"), "a blocked request uses up nothing of the other rule")
}

// TestResetHeadersNeverRecede: after a client's last admission, probed every
// 3 s on a virtual clock until it is admitted again, `t` and
// X-RateLimit-Reset name the same instant while Retry-After counts down
// (t ≥ Retry-After on every denial), for every algorithm.
func TestResetHeadersNeverRecede(t *testing.T) {
	t.Parallel()
	for _, a := range []policy.Algorithm{policy.SlidingWindow, policy.WeightedWindow, policy.FixedWindow, policy.TokenBucket, policy.GCRA, policy.SlidingLog} {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			c := &vclock.Clock{}
			c.NS.Store(1_800_000_000*int64(time.Second) + 123_456_789)
			lim := clockLimiter(t, c, policy.Rule{Name: "api", Limit: 10, Window: time.Minute, Algorithm: a})
			url, hc := limited(t, lim, httplimit.Config{Routes: oneRoute("api")})
			for i := range 10 {
				resp, _ := get(t, hc, url, nil)
				require.Equal(t, http.StatusOK, resp.StatusCode, "admission %d", i+1)
				c.NS.Add(int64(100 * time.Millisecond))
			}
			var firstWhole, lastXReset int64 = -1, -1
			whole := false // admitted again
			for probe := 0; probe < 30 && !whole; probe++ {
				c.NS.Add(int64(3 * time.Second))
				now := c.NS.Load()
				resp, _ := get(t, hc, url, nil)
				at := "probe " + strconv.Itoa(probe)
				rl := sfItem(t, resp.Header, "RateLimit")
				tt := param(t, rl, "t")
				xReset := sfInteger(t, resp.Header, "X-RateLimit-Reset")
				if resp.StatusCode == http.StatusOK {
					whole = true // room again (not yet whole, perhaps)
					break
				}
				require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, at)
				retry := sfInteger(t, resp.Header, "Retry-After")
				require.GreaterOrEqual(t, tt, retry, "%s: t %d before Retry-After %d", at, tt, retry)
				w := now + tt*int64(time.Second)
				if firstWhole < 0 {
					firstWhole = w
				}
				// Rounded up to whole seconds, the instant may read up to
				// a second later than the first probe's, never more.
				require.LessOrEqual(t, w, firstWhole+int64(time.Second), "%s: reset receded by %v", at, time.Duration(w-firstWhole))
				if lastXReset >= 0 {
					// The middleware's wall clock barely moves here: the
					// reset time, in Unix seconds, never moves later.
					require.LessOrEqual(t, xReset, lastXReset, "%s: X-RateLimit-Reset receded", at)
				}
				lastXReset = xReset
			}
			require.True(t, whole, "the client must be admitted again within the window")
		})
	}
}

// TestShadowNeverInLegacyHeaders: a shadow rule layered on an enforced
// one never speaks in the legacy trio, even when it would have denied and
// has less left; alone, it sends no trio at all.
func TestShadowNeverInLegacyHeaders(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t,
		policy.Rule{Name: "enforced", Limit: 10, Window: time.Minute},
		policy.Rule{Name: "trial", Limit: 3, Window: time.Minute, Shadow: true},
	)
	url, c := limited(t, lim, httplimit.Config{Routes: []httplimit.Route{
		{Pattern: "/both", Rules: []httplimit.Rule{{Name: "trial"}, {Name: "enforced"}}},
		{Pattern: "/trial", Rules: []httplimit.Rule{{Name: "trial"}}},
	}})
	for i := range 6 {
		resp, _ := get(t, c, url+"/both", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		at := "request " + strconv.Itoa(i+1)
		assert.EqualValues(t, 10, sfInteger(t, resp.Header, "X-RateLimit-Limit"), at)
		assert.EqualValues(t, 10-(i+1), sfInteger(t, resp.Header, "X-RateLimit-Remaining"), at)
		names, rl := sfList(t, resp.Header, "RateLimit")
		assert.Equal(t, []string{"trial", "enforced"}, names, at)
		_, shadowed := rl["trial"].Params.Get("sluice-shadow")
		assert.Equal(t, i >= 3, shadowed, at)
	}
	resp, _ := get(t, c, url+"/trial", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, resp.Header.Values("X-RateLimit-Limit"), "a dry run alone has no trio")
	_ = sfItem(t, resp.Header, "RateLimit")
}

// TestSoftBandOnTheWire: a request admitted past the limit, in the soft
// band, says so in RateLimit (sluice-soft), byte for byte as
// RateLimitField writes it; the requests within the limit do not.
func TestSoftBandOnTheWire(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "api", Limit: 4, Soft: 0.5, Window: time.Minute})
	url, c := limited(t, lim, httplimit.Config{Routes: oneRoute("api")})
	for i, want := range []int{200, 200, 200, 200, 200, 200, 429} {
		resp, _ := get(t, c, url, nil)
		at := "request " + strconv.Itoa(i+1)
		require.Equal(t, want, resp.StatusCode, at)
		rl := sfItem(t, resp.Header, "RateLimit")
		v, soft := rl.Params.Get("sluice-soft")
		assert.Equal(t, i >= 4 && want == 200, soft && v == true, at)
		assert.EqualValues(t, max(4-(i+1), 0), param(t, rl, "r"), at)
		assert.EqualValues(t, 4, param(t, sfItem(t, resp.Header, "RateLimit-Policy"), "q"), at)
	}
}

// TestTimelineInDocs replays the timeline of docs/front-door.md ("What the
// numbers mean") on a virtual clock: a SlidingWindow of 10 per 60 s in 10
// sub-windows, 5 requests at 1 s and 5 at 14 s, then one every 3 s; each
// denial names the reset at 78 s while Retry-After counts down to 66 s.
func TestTimelineInDocs(t *testing.T) {
	t.Parallel()
	const t0 = 1_800_000_000 * int64(time.Second) // a multiple of the 6 s sub-window
	c := &vclock.Clock{}
	lim := clockLimiter(t, c, policy.Rule{Name: "api", Limit: 10, Window: time.Minute, Precision: 10})
	url, hc := limited(t, lim, httplimit.Config{Routes: oneRoute("api")})
	at := func(s int64) { c.NS.Store(t0 + s*int64(time.Second)) }
	type answer struct{ status, r, t, retry int64 }
	ask := func() answer {
		resp, _ := get(t, hc, url, nil)
		rl := sfItem(t, resp.Header, "RateLimit")
		a := answer{status: int64(resp.StatusCode), r: param(t, rl, "r"), t: param(t, rl, "t")}
		if resp.StatusCode != http.StatusOK {
			a.retry = sfInteger(t, resp.Header, "Retry-After")
		}
		return a
	}
	at(1)
	var a answer
	for range 5 {
		a = ask()
	}
	assert.Equal(t, answer{200, 5, 65, 0}, a, "1 s")
	at(14)
	for range 5 {
		a = ask()
	}
	assert.Equal(t, answer{200, 0, 64, 0}, a, "14 s")
	for s := int64(17); s <= 65; s += 3 {
		at(s)
		assert.Equal(t, answer{429, 0, 78 - s, 66 - s}, ask(), "%d s", s)
	}
	at(68)
	assert.Equal(t, answer{200, 4, 64, 0}, ask(), "68 s")
}
