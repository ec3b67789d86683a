package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// Limit every method of a server to 100 calls per minute per client IP.
func ExampleUnaryServerInterceptor() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "rpc", Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	cfg := grpclimit.Config{Limiter: limiter, Rule: "rpc", ErrorMode: grpclimit.ErrorReject}
	unary, err := grpclimit.UnaryServerInterceptor(cfg)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(unary))
	defer srv.Stop()
}

// Routes by method pattern, the most specific winning, with layered
// rules: every call 20 a second per client IP; the methods of
// acme.Orders.v1.Orders besides that 1000 an hour per tenant (both
// checked, all or none: a denial by one rule consumes nothing from the
// other); Create alone 10 a minute per tenant; health checks exempt.
func ExampleRoute() {
	limiter, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "per-ip", Limit: 20, Window: time.Second},
		policy.Rule{Name: "tenant-hourly", Limit: 1000, Window: time.Hour},
		policy.Rule{Name: "create", Limit: 10, Window: time.Minute},
	)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	tenant := grpclimit.Metadata("x-tenant") // authenticated by an earlier interceptor
	cfg := grpclimit.Config{
		Limiter: limiter,
		Routes: []grpclimit.Route{
			{Pattern: "*", Rules: []grpclimit.Rule{{Name: "per-ip"}}},
			{Pattern: "/acme.Orders.v1.Orders/*", Rules: []grpclimit.Rule{{Name: "per-ip"}, {Name: "tenant-hourly", Key: tenant}}},
			{Pattern: "/acme.Orders.v1.Orders/Create", Rules: []grpclimit.Rule{{Name: "per-ip"}, {Name: "create", Key: tenant}}},
			{Pattern: "/grpc.health.v1.Health/*", Unlimited: true},
		},
		ErrorMode: grpclimit.ErrorReject,
	}
	unary, err := grpclimit.UnaryServerInterceptor(cfg)
	if err != nil {
		log.Fatal(err)
	}
	stream, err := grpclimit.StreamServerInterceptor(cfg)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
	defer srv.Stop()
}

// Limit the opening of streams of one method, keyed by an API key sent as
// metadata, hashed to keep it out of the store.
func ExampleStreamServerInterceptor() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "watch", Limit: 10, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	stream, err := grpclimit.StreamServerInterceptor(grpclimit.Config{
		Limiter:   limiter,
		Methods:   map[string]string{"/grpc.health.v1.Health/Watch": "watch"},
		Key:       grpclimit.Hashed(grpclimit.Metadata("x-api-key")),
		ErrorMode: grpclimit.ErrorReject,
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.StreamInterceptor(stream))
	defer srv.Stop()
}

// The identity hook: a KeyFunc is any function of the call's context. This
// one keys a call by the common name of the client's TLS certificate, from
// the peer's AuthInfo (a server with mutual TLS).
func ExampleKeyFunc() {
	byCert := func(ctx context.Context, fullMethod string) (string, error) {
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
	_ = grpclimit.Config{Key: byCert}
}

// Behind a proxy (Envoy, an ingress) that appends X-Forwarded-For: trust
// its addresses, and read the client from the metadata. A trusted range
// that covers everyone is refused with its reason.
func ExampleClientIP() {
	key, err := grpclimit.ClientIP(httplimit.ClientIP{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Header:         httplimit.XForwardedFor,
	})
	fmt.Println(key != nil, err)

	_, err = grpclimit.ClientIP(httplimit.ClientIP{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")},
		Header:         httplimit.XForwardedFor,
	})
	fmt.Println(err)
	// Output:
	// true <nil>
	// httplimit: ClientIP.TrustedProxies holds 0.0.0.0/0: a range shorter than /8 trusts peers across the internet, each of which could then write its own key into X-Forwarded-For; list your proxies' own addresses (or set AllowBroadIdentity if every address in it is a proxy you run)
}

// PeerIP is the default key: the peer's address, IPv6 by its /64.
func ExamplePeerIP() {
	_ = grpclimit.Config{Key: grpclimit.PeerIP()}
}

// Metadata keys a call by a metadata value.
func ExampleMetadata() {
	_ = grpclimit.Config{Key: grpclimit.Metadata("x-tenant")}
}

// The user an authentication interceptor stored in the context, else the
// client IP; together with the tenant.
func ExampleFirstOf() {
	type userKey struct{}
	user := grpclimit.User(func(ctx context.Context) (string, bool) {
		u, ok := ctx.Value(userKey{}).(string)
		return u, ok
	})
	_ = grpclimit.Config{Key: grpclimit.Composite(grpclimit.Metadata("x-tenant"), grpclimit.FirstOf(user, grpclimit.PeerIP()))}
}
