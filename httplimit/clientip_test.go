package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

var proxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}

func request(remote string, hdr ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func TestClientIPKey(t *testing.T) {
	t.Parallel()
	xff := httplimit.ClientIP{TrustedProxies: proxies, Header: httplimit.XForwardedFor}
	fwd := httplimit.ClientIP{TrustedProxies: proxies, Header: httplimit.Forwarded}
	real := httplimit.ClientIP{TrustedProxies: proxies, Header: httplimit.XRealIP}
	for _, tc := range []struct {
		name string
		c    httplimit.ClientIP
		r    *http.Request
		want string // "" for no identity
	}{
		{"peer v4", httplimit.ClientIP{}, request("192.0.2.1:1234"), "192.0.2.1"},
		{"peer v4-mapped", httplimit.ClientIP{}, request("[::ffff:192.0.2.1]:1234"), "192.0.2.1"},
		{"peer v6 grouped by /64", httplimit.ClientIP{}, request("[2001:db8:1:2:3:4:5:6]:1234"), "2001:db8:1:2::/64"},
		{"peer v6 with zone", httplimit.ClientIP{IPv6Prefix: 128}, request("[fe80::1%eth0]:1234"), "fe80::1"},
		{"peer v6 /128", httplimit.ClientIP{IPv6Prefix: 128}, request("[2001:db8::1]:1"), "2001:db8::1"},
		{"peer v4 /24", httplimit.ClientIP{IPv4Prefix: 24}, request("192.0.2.77:1"), "192.0.2.0/24"},
		{"peer not an address", httplimit.ClientIP{}, request("@unix"), ""},
		{"peer ignores headers", httplimit.ClientIP{}, request("192.0.2.1:1", "X-Forwarded-For", "198.51.100.9"), "192.0.2.1"},

		{"xff untrusted peer", xff, request("192.0.2.1:1", "X-Forwarded-For", "198.51.100.9"), "192.0.2.1"},
		{"xff trusted peer", xff, request("10.1.1.1:1", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"xff chain of proxies", xff, request("10.1.1.1:1", "X-Forwarded-For", "198.51.100.9, 10.2.2.2, 10.3.3.3"), "198.51.100.9"},
		{"xff spoofed left part", xff, request("10.1.1.1:1", "X-Forwarded-For", "1.2.3.4, 10.9.9.9, 198.51.100.9, 10.2.2.2"), "198.51.100.9"},
		{"xff several lines", xff, request("10.1.1.1:1", "X-Forwarded-For", "1.2.3.4", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"xff with ports", xff, request("10.1.1.1:1", "X-Forwarded-For", "198.51.100.9:555, [2001:db8:ffff::1]:80"), "198.51.100.9"},
		{"xff garbage left of client", xff, request("10.1.1.1:1", "X-Forwarded-For", "<script>, 198.51.100.9"), "198.51.100.9"},
		{"xff garbage from trusted hop", xff, request("10.1.1.1:1", "X-Forwarded-For", "198.51.100.9, garbage"), ""},
		{"xff all trusted", xff, request("10.1.1.1:1", "X-Forwarded-For", "10.5.5.5, 10.2.2.2"), "10.5.5.5"},
		{"xff absent", xff, request("10.1.1.1:1"), "10.1.1.1"},
		{"xff v6 client grouped", xff, request("10.1.1.1:1", "X-Forwarded-For", "2001:db8:1:2::99"), "2001:db8:1:2::/64"},
		{"forwarded untrusted peer", fwd, request("192.0.2.1:1", "Forwarded", "for=198.51.100.9"), "192.0.2.1"},
		{"forwarded", fwd, request("10.1.1.1:1", "Forwarded", `for=198.51.100.9;proto=https;by=10.1.1.1`), "198.51.100.9"},
		{"forwarded quoted v6", fwd, request("10.1.1.1:1", "Forwarded", `for="[2001:db8:1:2::1]:4711"`), "2001:db8:1:2::/64"},
		{"forwarded chain", fwd, request("10.1.1.1:1", "Forwarded", `for=1.2.3.4, for=198.51.100.9, for="10.2.2.2";proto=http`), "198.51.100.9"},
		{"forwarded case", fwd, request("10.1.1.1:1", "Forwarded", `For=198.51.100.9`), "198.51.100.9"},
		{"forwarded unknown", fwd, request("10.1.1.1:1", "Forwarded", `for=unknown`), ""},
		{"forwarded obfuscated", fwd, request("10.1.1.1:1", "Forwarded", `for=_hidden`), ""},
		{"forwarded no for", fwd, request("10.1.1.1:1", "Forwarded", `proto=https`), ""},
		{"forwarded unterminated", fwd, request("10.1.1.1:1", "Forwarded", `for="198.51.100.9`), ""},
		{"forwarded quote hides comma", fwd, request("10.1.1.1:1", "Forwarded", `for=198.51.100.9;ext="a,for=10.2.2.2"`), "198.51.100.9"},
		{"forwarded ignores xff", fwd, request("10.1.1.1:1", "X-Forwarded-For", "198.51.100.9"), "10.1.1.1"},
		{"x-real-ip trusted", real, request("10.1.1.1:1", "X-Real-IP", "198.51.100.9"), "198.51.100.9"},
		{"x-real-ip untrusted", real, request("192.0.2.1:1", "X-Real-IP", "198.51.100.9"), "192.0.2.1"},
		{"x-real-ip garbage", real, request("10.1.1.1:1", "X-Real-IP", "nope"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fn, err := tc.c.Key()
			require.NoError(t, err)
			key, err := fn(tc.r)
			if tc.want == "" {
				require.ErrorIs(t, err, httplimit.ErrNoIdentity)
				assert.Empty(t, key)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, key)
		})
	}
}

func TestClientIPRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    httplimit.ClientIP
		want string
	}{
		{"header without proxies", httplimit.ClientIP{Header: httplimit.XForwardedFor}, "without TrustedProxies"},
		{"unknown header", httplimit.ClientIP{TrustedProxies: proxies, Header: "X-Client"}, "X-Client"},
		{"v6 prefix", httplimit.ClientIP{IPv6Prefix: 129}, "IPv6Prefix"},
		{"v4 prefix", httplimit.ClientIP{IPv4Prefix: -1}, "IPv4Prefix"},
		{"invalid proxy", httplimit.ClientIP{TrustedProxies: []netip.Prefix{{}}}, "invalid prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.c.Key()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

type userKey struct{}

func TestKeyFuncs(t *testing.T) {
	t.Parallel()
	user := httplimit.User(func(ctx context.Context) (string, bool) {
		u, ok := ctx.Value(userKey{}).(string)
		return u, ok
	})
	withUser := func(r *http.Request, u string) *http.Request {
		return r.WithContext(context.WithValue(r.Context(), userKey{}, u))
	}
	apiKey := httplimit.Header("X-API-Key")
	for _, tc := range []struct {
		name string
		fn   httplimit.KeyFunc
		r    *http.Request
		want string
	}{
		{"header", apiKey, request("192.0.2.1:1", "X-Api-Key", "k1"), "h:k1"},
		{"header missing", apiKey, request("192.0.2.1:1"), ""},
		{"header empty", apiKey, request("192.0.2.1:1", "X-API-Key", ""), ""},
		{"user", user, withUser(request("192.0.2.1:1"), "ann"), "u:ann"},
		{"no user", user, request("192.0.2.1:1"), ""},
		{"first of: user", httplimit.FirstOf(user, httplimit.PeerIP()), withUser(request("192.0.2.1:1"), "ann"), "u:ann"},
		{"first of: ip", httplimit.FirstOf(user, httplimit.PeerIP()), request("192.0.2.1:1"), "192.0.2.1"},
		{"first of: none", httplimit.FirstOf(user, apiKey), request("192.0.2.1:1"), ""},
		{"composite", httplimit.Composite(user, apiKey), withUser(request("192.0.2.1:1", "X-API-Key", "k"), "ann"), "5:u:ann3:h:k"},
		{"composite part missing", httplimit.Composite(user, apiKey), withUser(request("192.0.2.1:1"), "ann"), ""},
		{"hashed", httplimit.Hashed(apiKey), request("192.0.2.1:1", "X-API-Key", "k1"), "#OAoQUsxRZd_m640l5H-csbnSHcsEbCGjnpviACXpUBw" /* sha256 of "h:k1", by openssl */},
		{"hashed missing", httplimit.Hashed(apiKey), request("192.0.2.1:1"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key, err := tc.fn(tc.r)
			if tc.want == "" {
				require.ErrorIs(t, err, httplimit.ErrNoIdentity)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, key)
		})
	}
}

// TestSpoofingOnTheWire runs the middleware on a real loopback server:
// the test client is the untrusted peer 127.0.0.1 unless the config trusts
// loopback, and the remaining count shows which key each request used.
func TestSpoofingOnTheWire(t *testing.T) {
	t.Parallel()
	remaining := func(t *testing.T, c *http.Client, url string, hdr map[string]string) string {
		resp, _ := get(t, c, url, hdr)
		return resp.Header.Get("X-RateLimit-Remaining")
	}
	t.Run("untrusted client's X-Forwarded-For never changes its key", func(t *testing.T) {
		t.Parallel()
		lim := newLimiter(t, policy.Rule{Name: "api", Limit: 100, Window: time.Minute})
		key, err := httplimit.ClientIP{TrustedProxies: proxies, Header: httplimit.XForwardedFor}.Key()
		require.NoError(t, err)
		url, c := limited(t, lim, httplimit.Config{Routes: oneRoute("api"), Key: key})
		for i, xff := range []string{"", "198.51.100.1", "198.51.100.2", "10.0.0.1, 203.0.113.5", strings.Repeat("1.1.1.1,", 100)} {
			assert.Equal(t, itoa(99-i), remaining(t, c, url, map[string]string{"X-Forwarded-For": xff}), "X-Forwarded-For %q", xff)
		}
	})
	t.Run("trusted chain yields the client", func(t *testing.T) {
		t.Parallel()
		lim := newLimiter(t, policy.Rule{Name: "api", Limit: 100, Window: time.Minute})
		key, err := httplimit.ClientIP{
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")},
			Header:         httplimit.XForwardedFor,
		}.Key()
		require.NoError(t, err)
		url, c := limited(t, lim, httplimit.Config{Routes: oneRoute("api"), Key: key})
		assert.Equal(t, "99", remaining(t, c, url, map[string]string{"X-Forwarded-For": "198.51.100.1, 10.0.0.7"}))
		assert.Equal(t, "99", remaining(t, c, url, map[string]string{"X-Forwarded-For": "198.51.100.2"}), "another client")
		assert.Equal(t, "98", remaining(t, c, url, map[string]string{"X-Forwarded-For": "6.6.6.6, 198.51.100.1"}), "the first client again, whatever it claims")
	})
	t.Run("IPv6 rotation within a /64 shares one key", func(t *testing.T) {
		t.Parallel()
		lim := newLimiter(t, policy.Rule{Name: "api", Limit: 100, Window: time.Minute})
		key, err := httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Header: httplimit.Forwarded}.Key()
		require.NoError(t, err)
		url, c := limited(t, lim, httplimit.Config{Routes: oneRoute("api"), Key: key})
		for i, a := range []string{"2001:db8:7:7::1", "2001:db8:7:7:ffff:ffff:ffff:fffe", "2001:db8:7:7:1234::5"} {
			assert.Equal(t, itoa(99-i), remaining(t, c, url, map[string]string{"Forwarded": `for="[` + a + `]"`}), a)
		}
		assert.Equal(t, "99", remaining(t, c, url, map[string]string{"Forwarded": `for="[2001:db8:7:8::1]"`}), "the next /64 is another client")
	})
	t.Run("no identity is answered, not bucketed", func(t *testing.T) {
		t.Parallel()
		lim := newLimiter(t, policy.Rule{Name: "api", Limit: 100, Window: time.Minute})
		url, c := limited(t, lim, httplimit.Config{Routes: oneRoute("api"), Key: httplimit.Header("X-API-Key")})
		resp, body := get(t, c, url, nil)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		checkProblem(t, resp, body)
		resp, body = get(t, c, url, map[string]string{"X-API-Key": strings.Repeat("k", 300)})
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "a key past MaxKeyLength")
		assert.Contains(t, string(body), "longer than the rate limiter accepts")
		assert.NotContains(t, string(body), "kkk", "the body never repeats the header")
	})
}

func itoa(n int) string { return strconv.Itoa(n) }
