package grpclimit

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// BenchmarkCheck is the interceptors' work per call without the transport:
// find the route, name the client, decide, build the header metadata (and
// the status of a denial). "one" is a route of one rule, "layered" of two;
// "denied" is a key over its limit.
func BenchmarkCheck(b *testing.B) {
	lim, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "ip", Limit: 4_000_000_000, Window: time.Minute},
		policy.Rule{Name: "tenant", Limit: 4_000_000_000, Window: time.Minute},
		policy.Rule{Name: "tight", Limit: 1, Window: time.Hour},
	)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lim.Close() })
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000}})
	for _, bc := range []struct {
		name  string
		route Route
	}{
		{"one", Route{Pattern: "*", Rules: []Rule{{Name: "ip"}}}},
		{"layered", Route{Pattern: "*", Rules: []Rule{{Name: "ip"}, {Name: "tenant"}}}},
		{"denied", Route{Pattern: "*", Rules: []Rule{{Name: "tight"}}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, err := newLimiter(Config{Limiter: lim, Routes: []Route{bc.route}, ErrorMode: ErrorReject})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				var h held
				md, _ := l.check(ctx, "/sluice.test.Echo/Say", &h)
				if md == nil {
					b.Fatal("no metadata")
				}
			}
		})
	}
}
