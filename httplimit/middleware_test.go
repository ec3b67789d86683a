package httplimit_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// newLimiter returns a local limiter with rules, closed at cleanup.
func newLimiter(t *testing.T, rules ...policy.Rule) *sluice.Limiter {
	t.Helper()
	lim, err := sluice.New(sluice.Options{}, rules...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	return lim
}

// serve runs h on a real http.Server on a loopback port and returns its
// URL and a client, both closed at cleanup.
func serve(t *testing.T, h http.Handler) (string, *http.Client) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := srv.Client()
	t.Cleanup(c.CloseIdleConnections)
	return srv.URL, c
}

// get sends a GET with the given headers and returns the response with its
// body read.
func get(t *testing.T, c *http.Client, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp, body
}

// limited returns a server behind the middleware configured by cfg (whose
// Limiter and ErrorMode default to lim and ErrorReject).
func limited(t *testing.T, lim *sluice.Limiter, cfg httplimit.Config) (string, *http.Client) {
	t.Helper()
	cfg.Limiter = lim
	if cfg.ErrorMode == 0 {
		cfg.ErrorMode = httplimit.ErrorReject
	}
	mw, err := httplimit.New(cfg)
	require.NoError(t, err)
	return serve(t, mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})))
}

func oneRoute(rule string) []httplimit.Route {
	return []httplimit.Route{{Pattern: "/", Rules: []httplimit.Rule{{Name: rule}}}}
}

// sfItem parses a header that must be an RFC 9651 List of exactly one
// Item whose bare item is an sf-string, and returns the item.
func sfItem(t *testing.T, h http.Header, name string) httpsfv.Item {
	t.Helper()
	require.Len(t, h.Values(name), 1, name)
	list, err := httpsfv.UnmarshalList(h.Values(name))
	require.NoError(t, err, "%s: %q", name, h.Get(name))
	require.Len(t, list, 1, name)
	it, ok := list[0].(httpsfv.Item)
	require.True(t, ok, "%s: member is an Item", name)
	_, ok = it.Value.(string)
	require.True(t, ok, "%s: the policy name is an sf-string", name)
	return it
}

func param(t *testing.T, it httpsfv.Item, key string) int64 {
	t.Helper()
	v, ok := it.Params.Get(key)
	require.True(t, ok, "parameter %s", key)
	n, ok := v.(int64)
	require.True(t, ok, "parameter %s is an sf-integer: %#v", key, v)
	return n
}

// checkProblem checks body against the RFC 9457 problem details schema
// (Appendix A: type a URI reference, title and detail strings, status an
// integer from 100 to 599, instance a URI reference), plus the retry-after
// extension member, and returns it.
func checkProblem(t *testing.T, resp *http.Response, body []byte) map[string]any {
	t.Helper()
	require.Equal(t, httplimit.ProblemContentType, resp.Header.Get("Content-Type"))
	var p map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&p), "%s", body)
	require.False(t, dec.More(), "one JSON value")
	for k, v := range p {
		switch k {
		case "type", "instance":
			s, ok := v.(string)
			require.True(t, ok, "%s is a string", k)
			_, err := url.Parse(s)
			require.NoError(t, err, "%s is a URI reference", k)
		case "title", "detail":
			require.IsType(t, "", v, k)
		case "status":
			n, err := v.(json.Number).Int64()
			require.NoError(t, err, "status is an integer")
			require.True(t, n >= 100 && n <= 599, "status %d", n)
			require.EqualValues(t, resp.StatusCode, n, "status matches the response")
		case "retry-after":
			n, err := v.(json.Number).Int64()
			require.NoError(t, err, "retry-after is an integer")
			require.Positive(t, n)
		default:
			t.Errorf("unexpected member %q", k)
		}
	}
	return p
}

func TestHeadersAndDenial(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "api", Limit: 3, Window: time.Minute})
	url, c := limited(t, lim, httplimit.Config{Routes: oneRoute("api")})
	for i := range 3 {
		resp, body := get(t, c, url, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)

		pol := sfItem(t, resp.Header, "RateLimit-Policy")
		assert.Equal(t, "api", pol.Value)
		assert.EqualValues(t, 3, param(t, pol, "q"))
		assert.EqualValues(t, 60, param(t, pol, "w"))

		rl := sfItem(t, resp.Header, "RateLimit")
		assert.Equal(t, "api", rl.Value)
		assert.EqualValues(t, 2-i, param(t, rl, "r"))
		reset := param(t, rl, "t")
		assert.True(t, reset >= 60 && reset <= 66, "t=%d: the window plus at most a sub-window", reset)

		assert.Equal(t, "3", resp.Header.Get("X-RateLimit-Limit"))
		assert.Equal(t, strconv.Itoa(2-i), resp.Header.Get("X-RateLimit-Remaining"))
		unix, err := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64)
		require.NoError(t, err)
		assert.InDelta(t, time.Now().Add(time.Minute).Unix(), unix, 10)
		assert.Empty(t, resp.Header.Get("Retry-After"))
	}
	resp, body := get(t, c, url, nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After is delay-seconds")
	assert.True(t, retry >= 1 && retry <= 66, "Retry-After %d", retry)
	rl := sfItem(t, resp.Header, "RateLimit")
	assert.EqualValues(t, 0, param(t, rl, "r"))
	p := checkProblem(t, resp, body)
	assert.Equal(t, "about:blank", p["type"])
	assert.Equal(t, "Too Many Requests", p["title"])
	assert.Equal(t, json.Number(strconv.Itoa(retry)), p["retry-after"], "the body and the header agree")
	assert.Contains(t, p["detail"], `"api"`)
}

func TestOmitHeaders(t *testing.T) {
	t.Parallel()
	all := []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}
	for _, tc := range []struct {
		name string
		omit httplimit.Headers
		want []string // on a denial
	}{
		{"none omitted", 0, all},
		{"ietf only", httplimit.HeaderXRateLimit | httplimit.HeaderRetryAfter, []string{"RateLimit-Policy", "RateLimit"}},
		{"legacy only", httplimit.HeaderRateLimitPolicy | httplimit.HeaderRateLimit, []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}},
		{"all omitted", httplimit.HeaderRateLimitPolicy | httplimit.HeaderRateLimit | httplimit.HeaderXRateLimit | httplimit.HeaderRetryAfter, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, policy.Rule{Name: "api", Limit: 1, Window: time.Minute})
			url, c := limited(t, lim, httplimit.Config{Routes: oneRoute("api"), OmitHeaders: tc.omit})
			resp, _ := get(t, c, url, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			resp, _ = get(t, c, url, nil)
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			for _, h := range all {
				assert.Equal(t, slices.Contains(tc.want, h), resp.Header.Get(h) != "", h)
			}
		})
	}
}

func TestCustomDeny(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "api", Limit: 1, Window: time.Minute})
	url, c := limited(t, lim, httplimit.Config{
		Routes: oneRoute("api"),
		Deny: func(w http.ResponseWriter, _ *http.Request, d httplimit.Denial) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "slow down, "+d.Rule)
		},
	})
	get(t, c, url, nil)
	resp, body := get(t, c, url, nil)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "slow down, api", string(body))
	assert.NotEmpty(t, resp.Header.Get("Retry-After"), "the headers are set before Deny")
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t,
		policy.Rule{Name: "api", Limit: 100, Window: time.Minute},
		policy.Rule{Name: "login", Limit: 1, Window: time.Minute},
	)
	url, c := limited(t, lim, httplimit.Config{Routes: []httplimit.Route{
		{Pattern: "/api/", Rules: []httplimit.Rule{{Name: "api"}}},
		{Pattern: "POST /login", Rules: []httplimit.Rule{{Name: "login"}}},
		{Pattern: "GET /api/upload", Rules: []httplimit.Rule{{Name: "api"}}, Cost: func(*http.Request) int64 { return 10 }},
	}})
	resp, _ := get(t, c, url+"/api/x", nil)
	assert.Equal(t, "99", resp.Header.Get("X-RateLimit-Remaining"))
	resp, _ = get(t, c, url+"/api/upload", nil)
	assert.Equal(t, "89", resp.Header.Get("X-RateLimit-Remaining"), "the cost of the route")
	resp, _ = get(t, c, url+"/login", nil)
	assert.Empty(t, resp.Header.Get("RateLimit"), "GET /login matches no route: not limited")
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		resp, err := c.Post(url+"/login", "text/plain", nil)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, want, resp.StatusCode, "POST /login #%d", i)
	}
}

// TestWrappedHandler: the middleware around one handler of a ServeMux finds
// its route by the pattern the ServeMux matched.
func TestWrappedHandler(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "item", Limit: 5, Window: time.Minute})
	mw, err := httplimit.New(httplimit.Config{
		Limiter:   lim,
		ErrorMode: httplimit.ErrorReject,
		Routes:    []httplimit.Route{{Pattern: "GET /items/{id}", Rules: []httplimit.Rule{{Name: "item"}}}},
	})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.PathValue("id"))
	})))
	url, c := serve(t, mux)
	resp, body := get(t, c, url+"/items/7", nil)
	assert.Equal(t, "7", string(body))
	assert.Equal(t, "4", resp.Header.Get("X-RateLimit-Remaining"))
}

func TestErrorMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		mode     httplimit.ErrorMode
		wantCode int
	}{
		{"reject", httplimit.ErrorReject, http.StatusServiceUnavailable},
		{"serve", httplimit.ErrorServe, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, policy.Rule{Name: "api", Limit: 5, Window: time.Minute})
			var reported atomic.Int32
			url, c := limited(t, lim, httplimit.Config{
				Routes:      oneRoute("api"),
				ErrorMode:   tc.mode,
				ReportError: func(_ *http.Request, err error) { assert.ErrorIs(t, err, sluice.ErrClosed); reported.Add(1) },
			})
			require.NoError(t, lim.Close())
			resp, body := get(t, c, url, nil)
			assert.Equal(t, tc.wantCode, resp.StatusCode)
			assert.Empty(t, resp.Header.Get("RateLimit"), "no decision, no headers")
			assert.EqualValues(t, 1, reported.Load())
			if tc.wantCode != http.StatusOK {
				checkProblem(t, resp, body)
			}
		})
	}
}

func TestInvalidCostIsAnError(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "api", Limit: 5, Window: time.Minute})
	url, c := limited(t, lim, httplimit.Config{Routes: []httplimit.Route{{
		Pattern: "/", Rules: []httplimit.Rule{{Name: "api"}},
		Cost: func(*http.Request) int64 { return 6 },
	}}})
	resp, _ := get(t, c, url, nil)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "never a silent pass")
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "api", Limit: 5, Window: time.Minute})
	ok := oneRoute("api")
	for _, tc := range []struct {
		name string
		cfg  httplimit.Config
		want string
	}{
		{"no limiter", httplimit.Config{Routes: ok, ErrorMode: httplimit.ErrorReject}, "Limiter is nil"},
		{"no routes", httplimit.Config{Limiter: lim, ErrorMode: httplimit.ErrorReject}, "Routes is empty"},
		{"no error mode", httplimit.Config{Limiter: lim, Routes: ok}, "ErrorMode"},
		{"unknown rule", httplimit.Config{Limiter: lim, Routes: oneRoute("nope"), ErrorMode: httplimit.ErrorReject}, `"nope"`},
		{"rule twice", httplimit.Config{Limiter: lim, Routes: []httplimit.Route{{Pattern: "/", Rules: []httplimit.Rule{{Name: "api"}, {Name: "api"}}}}, ErrorMode: httplimit.ErrorReject}, "twice"},
		{"no rules", httplimit.Config{Limiter: lim, Routes: []httplimit.Route{{Pattern: "/"}}, ErrorMode: httplimit.ErrorReject}, "no Rules"},
		{"bad pattern", httplimit.Config{Limiter: lim, Routes: []httplimit.Route{{Pattern: "GET", Rules: ok[0].Rules}}, ErrorMode: httplimit.ErrorReject}, "pattern"},
		{"duplicate pattern", httplimit.Config{Limiter: lim, Routes: append(oneRoute("api"), ok...), ErrorMode: httplimit.ErrorReject}, "pattern"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := httplimit.New(tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestNoAllocations: an admitted request costs the middleware two
// allocations with the headers on (one string holding every changing
// header value, one []string for them) and none with them off, with one
// rule or two layered. Not
// parallel: AllocsPerRun counts every goroutine's allocations.
func TestNoAllocations(t *testing.T) {
	for _, tc := range []struct {
		omit  httplimit.Headers
		rules []string
		want  float64
	}{{0, []string{"api"}, 2}, {allHeaders, []string{"api"}, 0}, {0, []string{"second", "hour"}, 2}, {allHeaders, []string{"second", "hour"}, 0}} {
		h := benchHandlerRules(t, tc.omit, tc.rules...)
		r := benchRequest()
		w := &nopWriter{h: make(http.Header)}
		got := testing.AllocsPerRun(1000, func() { clear(w.h); h.ServeHTTP(w, r) })
		assert.Equal(t, tc.want, got, "omit %b, rules %v", tc.omit, tc.rules)
		assert.Equal(t, http.StatusOK, w.code)
	}
}

// TestRateLimitFieldMatchesHTTPSFV: the middleware's RateLimit value, built
// without httpsfv's allocations, is byte for byte what httpsfv serializes.
func TestRateLimitFieldMatchesHTTPSFV(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "api.v1_x-y", Limit: 2, Window: 1500 * time.Millisecond, Precision: 3})
	url, c := limited(t, lim, httplimit.Config{Routes: oneRoute("api.v1_x-y")})
	for range 3 {
		resp, _ := get(t, c, url, nil)
		rl := sfItem(t, resp.Header, "RateLimit")
		d := sluice.Decision{Remaining: param(t, rl, "r"), ResetAfter: time.Duration(param(t, rl, "t")) * time.Second}
		want, err := httplimit.RateLimitField("api.v1_x-y", d)
		require.NoError(t, err)
		assert.Equal(t, want, resp.Header.Get("RateLimit"))
		pol := sfItem(t, resp.Header, "RateLimit-Policy")
		_, hasW := pol.Params.Get("w")
		assert.False(t, hasW, "a 1.5s window is not whole seconds: no w")
	}
}
