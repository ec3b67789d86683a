package grpclimit_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// selfSigned returns a self-signed certificate for cn, valid for
// 127.0.0.1, and its parsed form.
func selfSigned(t *testing.T, cn string) (tls.Certificate, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, cert
}

// certCN is an identity hook on the call's auth info: the common name of
// the client's TLS certificate.
func certCN(ctx context.Context, _ string) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", fmt.Errorf("%w: no peer", grpclimit.ErrNoIdentity)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return "", fmt.Errorf("%w: no client certificate", grpclimit.ErrNoIdentity)
	}
	return "cn:" + info.State.PeerCertificates[0].Subject.CommonName, nil
}

// TestAuthInfoKey: over a real mutual-TLS connection, calls are keyed by
// the client certificate's name, read from the peer's AuthInfo.
func TestAuthInfoKey(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "svc", Limit: 2, Window: time.Minute})
	srvCert, srvX509 := selfSigned(t, "server")
	roots := x509.NewCertPool()
	roots.AddCert(srvX509)
	srvCreds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{srvCert}, ClientAuth: tls.RequireAnyClientCert, MinVersion: tls.VersionTLS13})
	client := func(cn string) credentials.TransportCredentials {
		c, _ := selfSigned(t, cn)
		return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{c}, RootCAs: roots, MinVersion: tls.VersionTLS13})
	}
	cfg := grpclimit.Config{Limiter: lim, Rule: "svc", Key: certCN}
	// Two clients on one address, each with its own certificate: two keys.
	billing := serve(t, cfg, srvCreds, client("billing"))
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		st, hdr := call(t, t.Context(), billing, "/sluice.test.Echo/Say")
		require.Equal(t, want, st.Code(), "billing call %d: %v", i+1, st)
		assert.EqualValues(t, max(1-i, 0), param(t, item(t, hdr, "ratelimit"), "r"))
	}
	// The same server config, another client certificate.
	search := serve(t, cfg, srvCreds, client("search"))
	st, hdr := call(t, t.Context(), search, "/sluice.test.Echo/Say")
	require.Equal(t, codes.OK, st.Code(), "another certificate, another key")
	assert.EqualValues(t, 1, param(t, item(t, hdr, "ratelimit"), "r"))
	p, err := lim.Peek("svc", "cn:billing")
	require.NoError(t, err)
	assert.EqualValues(t, 0, p.Remaining, "the key is the certificate's name")
}

// TestClientIP: behind a trusted proxy, the client address comes from the
// forwarding field in the metadata, walked from the right; an untrusted
// peer's field is never read.
func TestClientIP(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "rpc", Limit: 100, Window: time.Minute})
	trusting := func(p string) grpclimit.KeyFunc {
		fn, err := grpclimit.ClientIP(httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix(p)}, Header: httplimit.XForwardedFor})
		require.NoError(t, err)
		return fn
	}
	behind := serve(t, grpclimit.Config{Limiter: lim, Rule: "rpc", Key: trusting("127.0.0.0/8")}, nil, nil)
	direct := serve(t, grpclimit.Config{Limiter: lim, Rule: "rpc", Key: trusting("10.0.0.0/8")}, nil, nil)
	xff := func(v string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "x-forwarded-for", v)
	}
	for i, v := range []string{"198.51.100.7", "6.6.6.6, 198.51.100.7", "198.51.100.7, 127.0.0.1"} {
		st, _ := call(t, xff(v), behind, "/sluice.test.Echo/Say")
		require.Equal(t, codes.OK, st.Code())
		p, err := lim.Peek("rpc", "198.51.100.7")
		require.NoError(t, err)
		assert.EqualValues(t, 99-i, p.Remaining, "x-forwarded-for %q: the client is 198.51.100.7", v)
	}
	for i, v := range []string{"", "198.51.100.8", "198.51.100.9"} {
		st, hdr := call(t, xff(v), direct, "/sluice.test.Echo/Say")
		require.Equal(t, codes.OK, st.Code())
		assert.EqualValues(t, 99-i, param(t, item(t, hdr, "ratelimit"), "r"), "an untrusted peer is keyed by its address, whatever it sends")
	}
}

// TestClientIPBroadIdentity: grpclimit.ClientIP refuses what
// httplimit.ClientIP refuses, with the reason, unless AllowBroadIdentity.
func TestClientIPBroadIdentity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    httplimit.ClientIP
		want string
	}{
		{httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, Header: httplimit.XForwardedFor}, "0.0.0.0/0"},
		{httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::/0")}, Header: httplimit.Forwarded}, "::/0"},
		{httplimit.ClientIP{IPv4Prefix: 1}, "IPv4Prefix 1"},
		{httplimit.ClientIP{IPv6Prefix: 1}, "IPv6Prefix 1"},
	} {
		_, err := grpclimit.ClientIP(tc.c)
		require.Error(t, err, tc.want)
		assert.Contains(t, err.Error(), tc.want)
		assert.Contains(t, err.Error(), "AllowBroadIdentity")
		tc.c.AllowBroadIdentity = true
		_, err = grpclimit.ClientIP(tc.c)
		assert.NoError(t, err, tc.want)
	}
}

// TestNoIdentityHidesDetail: a trusted proxy's bad forwarding field fails
// the call with Unauthenticated, and the status names neither the proxy
// nor the field's content.
func TestNoIdentityHidesDetail(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "rpc", Limit: 100, Window: time.Minute})
	key, err := grpclimit.ClientIP(httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Header: httplimit.XRealIP})
	require.NoError(t, err)
	conn := serve(t, grpclimit.Config{Limiter: lim, Rule: "rpc", Key: key}, nil, nil)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-real-ip", "secret-host.internal")
	st, hdr := call(t, ctx, conn, "/sluice.test.Echo/Say")
	require.Equal(t, codes.Unauthenticated, st.Code())
	assert.Equal(t, "grpclimit: the call does not identify its client", st.Message())
	for _, s := range []string{"127.0.0.1", "secret", "X-Real-IP", "x-real-ip"} {
		assert.NotContains(t, strings.ToLower(st.Message()), strings.ToLower(s))
	}
	assert.Empty(t, st.Details())
	assert.Empty(t, hdr.Get("ratelimit"))
	_, err = key(peer.NewContext(metadata.NewIncomingContext(t.Context(), metadata.Pairs("x-real-ip", "secret-host.internal")),
		&peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}}), "/sluice.test.Echo/Say")
	require.ErrorIs(t, err, grpclimit.ErrNoIdentity)
	require.ErrorIs(t, err, httplimit.ErrNoIdentity)
	assert.Contains(t, err.Error(), "secret-host", "the detail stays in the error, for the log")
}

type userKey struct{}

// TestKeyFuncs: the combinators and their key spaces.
func TestKeyFuncs(t *testing.T) {
	t.Parallel()
	user := grpclimit.User(func(ctx context.Context) (string, bool) {
		u, ok := ctx.Value(userKey{}).(string)
		return u, ok
	})
	tenant := grpclimit.Metadata("x-tenant")
	withUser := func(ctx context.Context, u string) context.Context { return context.WithValue(ctx, userKey{}, u) }
	withTenant := func(ctx context.Context, v string) context.Context {
		return metadata.NewIncomingContext(ctx, metadata.Pairs("x-tenant", v))
	}
	peerCtx := peer.NewContext(t.Context(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::9"), Port: 1}})
	for _, tc := range []struct {
		name string
		fn   grpclimit.KeyFunc
		ctx  context.Context
		want string // "" for no identity
	}{
		{"user", user, withUser(t.Context(), "ann"), "u:ann"},
		{"no user", user, t.Context(), ""},
		{"empty user", user, withUser(t.Context(), ""), ""},
		{"composite", grpclimit.Composite(tenant, user), withUser(withTenant(t.Context(), "acme"), "ann"), "6:m:acme5:u:ann"},
		{"composite missing a part", grpclimit.Composite(tenant, user), withUser(t.Context(), "ann"), ""},
		{"composite of nothing", grpclimit.Composite(), t.Context(), ""},
		{"first of: the user", grpclimit.FirstOf(user, grpclimit.PeerIP()), withUser(peerCtx, "ann"), "u:ann"},
		{"first of: the peer", grpclimit.FirstOf(user, grpclimit.PeerIP()), peerCtx, "2001:db8:1:2::/64"},
		{"first of nothing", grpclimit.FirstOf(), peerCtx, ""},
		{"hashed", grpclimit.Hashed(tenant), withTenant(t.Context(), "secret"), "#NC-HcNIc-I-n1kVju_cTRUnZYJ3ws31X8NVG6krtDi8"}, // sha256 of "m:secret", base64url,
		{"hashed without identity", grpclimit.Hashed(tenant), t.Context(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, err := tc.fn(tc.ctx, "/p.S/M")
			if tc.want == "" {
				require.ErrorIs(t, err, grpclimit.ErrNoIdentity)
				assert.Empty(t, k)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, k)
		})
	}
}
