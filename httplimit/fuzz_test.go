package httplimit_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/httplimit"
)

// validKey reports whether key is what ClientIP keys are: an address or a
// prefix, in canonical text.
func validKey(key string) bool {
	if a, err := netip.ParseAddr(key); err == nil {
		return a.String() == key
	}
	p, err := netip.ParsePrefix(key)
	return err == nil && p.Masked() == p && p.String() == key
}

// fuzzForwarding fuzzes one forwarding header through ClientIP.Key, as a
// trusted proxy would pass it on, with these invariants: no panic; a key or
// an ErrNoIdentity, never both, never an empty key; the key is an address
// or a prefix; an untrusted peer's key ignores the header; and a client
// cannot escape the hop a trusted proxy appends: whatever the client sent,
// once the proxy has appended its peer the key is that peer or no key.
func fuzzForwarding(f *testing.F, header string, appendHop func(string) string, seeds ...string) {
	for _, s := range seeds {
		f.Add(s, "10.0.0.1:80")
	}
	c := httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}, Header: header}
	key, err := c.Key()
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, value, remote string) {
		r := request(remote, header, value)
		k, err := key(r)
		if err != nil {
			require.ErrorIs(t, err, httplimit.ErrNoIdentity)
			require.Empty(t, k)
		} else {
			require.NotEmpty(t, k)
			require.True(t, validKey(k), "key %q", k)
		}
		if a, err := netip.ParseAddrPort(remote); err == nil && !a.Addr().Unmap().IsLoopback() && !netip.MustParsePrefix("10.0.0.0/8").Contains(a.Addr().Unmap()) {
			alone, aerr := key(request(remote))
			require.Equal(t, aerr == nil, err == nil)
			require.Equal(t, alone, k, "an untrusted peer's header is never read")
		}
		r = request("10.0.0.1:80", header, appendHop(value))
		k, err = key(r)
		if err == nil {
			require.Equal(t, "198.51.100.9", k, "the client escaped the hop the proxy appended")
		}
	})
}

func FuzzXForwardedFor(f *testing.F) {
	fuzzForwarding(f, httplimit.XForwardedFor, func(v string) string { return v + ", 198.51.100.9" },
		"198.51.100.1", "1.2.3.4, 10.0.0.2", "[2001:db8::1]:80, 10.0.0.3:1", ",,,", "unknown", strings.Repeat("10.0.0.1,", 40))
}

func FuzzForwarded(f *testing.F) {
	fuzzForwarding(f, httplimit.Forwarded, func(v string) string { return v + ", for=198.51.100.9" },
		"for=198.51.100.1", `for="[2001:db8::1]:4711";proto=https, for=10.0.0.2`, `for=unknown`, `for="`, `a=b;for="x,y"`, `;;,,`, `for=1.1.1.1;for=2.2.2.2`)
}

func FuzzXRealIP(f *testing.F) {
	c := httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Header: httplimit.XRealIP}
	key, err := c.Key()
	require.NoError(f, err)
	for _, s := range []string{"198.51.100.1", "[::1]:80", "", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		k, err := key(request("10.0.0.1:80", "X-Real-IP", value))
		if err != nil {
			require.ErrorIs(t, err, httplimit.ErrNoIdentity)
			return
		}
		require.True(t, validKey(k), "key %q", k)
		k, err = key(request("192.0.2.1:80", "X-Real-IP", value))
		require.NoError(t, err)
		require.Equal(t, "192.0.2.1", k, "an untrusted peer's X-Real-IP is never read")
	})
}

// FuzzKeyFuncs: the header, user and composite key functions never make an
// empty key, never let one kind of key pass for another, and Composite is
// injective: two different pairs of parts never make one key.
func FuzzKeyFuncs(f *testing.F) {
	f.Add("a", "b", "c", "d")
	f.Add("5:u:ann", "", "5:u:a", "nn3:h:k")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		r := request("192.0.2.1:1", "X-A", a, "X-B", b)
		r2 := request("192.0.2.1:1", "X-A", c, "X-B", d)
		comp := httplimit.Composite(httplimit.Header("X-A"), httplimit.Header("X-B"))
		k1, err1 := comp(r)
		k2, err2 := comp(r2)
		if err1 == nil && err2 == nil {
			require.NotEmpty(t, k1)
			require.Equal(t, a == c && b == d, k1 == k2, "%q %q / %q %q", a, b, c, d)
		}
		if k, err := httplimit.Header("X-A")(r); err == nil {
			require.True(t, strings.HasPrefix(k, "h:"))
			require.False(t, validKey(k), "a header value never reads as an IP key")
		} else {
			require.ErrorIs(t, err, httplimit.ErrNoIdentity)
		}
		h, err := httplimit.Hashed(httplimit.Header("X-A"))(r)
		if err == nil {
			require.Len(t, h, 44)
		}
	})
}
