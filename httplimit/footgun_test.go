package httplimit_test

import (
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/policy"
)

// TestBroadIdentityRefused: each setting that hands the key to the clients
// or lumps a large part of the internet into one key is refused by Key and
// Addr with its reason, and accepted with AllowBroadIdentity.
func TestBroadIdentityRefused(t *testing.T) {
	t.Parallel()
	pfx := netip.MustParsePrefix
	for _, tc := range []struct {
		name string
		c    httplimit.ClientIP
		want []string
	}{
		{"every IPv4 address trusted", httplimit.ClientIP{TrustedProxies: []netip.Prefix{pfx("0.0.0.0/0")}, Header: httplimit.XForwardedFor},
			[]string{"0.0.0.0/0", "shorter than /8", "X-Forwarded-For"}},
		{"every IPv6 address trusted", httplimit.ClientIP{TrustedProxies: []netip.Prefix{pfx("10.0.0.0/8"), pfx("::/0")}, Header: httplimit.Forwarded},
			[]string{"::/0", "shorter than /16"}},
		{"a /7 trusted", httplimit.ClientIP{TrustedProxies: []netip.Prefix{pfx("10.0.0.0/7")}, Header: httplimit.XRealIP},
			[]string{"10.0.0.0/7", "shorter than /8"}},
		{"a /15 of IPv6 trusted", httplimit.ClientIP{TrustedProxies: []netip.Prefix{pfx("2000::/15")}, Header: httplimit.XRealIP},
			[]string{"2000::/15", "shorter than /16"}},
		{"IPv4Prefix 1", httplimit.ClientIP{IPv4Prefix: 1}, []string{"IPv4Prefix 1", "2147483648", "16 to 32"}},
		{"IPv4Prefix 15", httplimit.ClientIP{IPv4Prefix: 15}, []string{"IPv4Prefix 15", "131072", "16 to 32"}},
		{"IPv6Prefix 1", httplimit.ClientIP{IPv6Prefix: 1}, []string{"IPv6Prefix 1", "32 to 128"}},
		{"IPv6Prefix 31", httplimit.ClientIP{IPv6Prefix: 31}, []string{"IPv6Prefix 31", "32 to 128"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.c.Key()
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.Contains(t, err.Error(), "AllowBroadIdentity", "the error names the way out")
			_, err = tc.c.Addr(request("192.0.2.1:1"))
			require.Error(t, err, "Addr checks c too")

			tc.c.AllowBroadIdentity = true
			key, err := tc.c.Key()
			require.NoError(t, err, "allowed with AllowBroadIdentity")
			k, err := key(request("192.0.2.1:1"))
			require.NoError(t, err)
			assert.NotEmpty(t, k)
		})
	}
	t.Run("the narrowest accepted", func(t *testing.T) {
		t.Parallel()
		key, err := httplimit.ClientIP{TrustedProxies: []netip.Prefix{pfx("10.0.0.0/8"), pfx("fd00::/16")},
			Header: httplimit.XForwardedFor, IPv4Prefix: 16, IPv6Prefix: 32}.Key()
		require.NoError(t, err)
		k, err := key(request("10.1.2.3:1", "X-Forwarded-For", "198.51.100.7"))
		require.NoError(t, err)
		assert.Equal(t, "198.51.0.0/16", k)
		k, err = key(request("[fd00::1]:1", "X-Forwarded-For", "2001:db8:1:2::3"))
		require.NoError(t, err)
		assert.Equal(t, "2001:db8::/32", k)
	})
}

// TestNoIdentityBodyHidesDetail: the default 400 for a trusted proxy's bad
// forwarding header names neither the proxy nor the header's content; the
// detail is in the log. Not parallel: it swaps slog's default logger, while
// no parallel test runs.
func TestNoIdentityBodyHidesDetail(t *testing.T) {
	logs := &logbuf.Buffer{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	lim := newLimiter(t, policy.Rule{Name: "api", Limit: 100, Window: time.Minute})
	for _, tc := range []struct {
		header, value string
		secret        []string // what the body must not hold
	}{
		{httplimit.XRealIP, "secret-host.internal", []string{"secret-host"}},
		{httplimit.XForwardedFor, "198.51.100.1, not-an-address-9f2c", []string{"9f2c", "198.51.100.1"}},
		{httplimit.Forwarded, `for=_hidden-node-77`, []string{"_hidden", "77"}},
	} {
		t.Run(tc.header, func(t *testing.T) {
			key, err := httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Header: tc.header}.Key()
			require.NoError(t, err)
			url, c := limited(t, lim, httplimit.Config{Routes: oneRoute("api"), Key: key})
			resp, body := get(t, c, url, map[string]string{tc.header: tc.value})
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			p := checkProblem(t, resp, body)
			assert.Equal(t, "the request does not identify its client", p["detail"])
			for _, s := range append([]string{"127.0.0.1", tc.header, strings.ToLower(tc.header), "trusted"}, tc.secret...) {
				assert.NotContains(t, string(body), s, "the body repeats %q", s)
			}
			assert.Contains(t, logs.String(), "127.0.0.1", "the log has the detail: the proxy")
			assert.Contains(t, logs.String(), tc.header, "the log has the detail: the header")
		})
	}
}
