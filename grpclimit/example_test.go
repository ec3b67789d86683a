package grpclimit_test

import (
	"log"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
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

// Limit the opening of streams of one method, keyed by an API key sent as
// metadata.
func ExampleStreamServerInterceptor() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "watch", Limit: 10, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	stream, err := grpclimit.StreamServerInterceptor(grpclimit.Config{
		Limiter:   limiter,
		Methods:   map[string]string{"/grpc.health.v1.Health/Watch": "watch"},
		Key:       grpclimit.Metadata("x-api-key"),
		ErrorMode: grpclimit.ErrorReject,
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.StreamInterceptor(stream))
	defer srv.Stop()
}

// PeerIP is the default key: the peer's address, IPv6 by its /64.
func ExamplePeerIP() {
	_ = grpclimit.Config{Key: grpclimit.PeerIP()}
}

// Metadata keys a call by a metadata value.
func ExampleMetadata() {
	_ = grpclimit.Config{Key: grpclimit.Metadata("x-tenant")}
}
