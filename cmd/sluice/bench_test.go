package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/policy"
)

// BenchmarkShouldRateLimit is one descriptor's decision through the
// service, without gRPC (what serve adds to the limiter's check), on 1000
// keys under their limit, with and without the gRPC round trip on
// loopback.
func BenchmarkShouldRateLimit(b *testing.B) {
	path := filepath.Join(b.TempDir(), "rl.yaml")
	require.NoError(b, os.WriteFile(path, []byte("domain: bench\ndescriptors:\n  - key: bench\n    rate_limit: {unit: minute, requests_per_unit: 100000000}\n"), 0o600))
	cfg, err := policy.LoadFile(path)
	require.NoError(b, err)
	reqs := make([]*rlspb.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*extrl.RateLimitDescriptor{desc("bench", fmt.Sprint("k", i))}}
	}
	newService := func(b *testing.B) *service {
		var c common
		l, _, err := c.limiter(cfg.Rules, nil, nil)
		require.NoError(b, err)
		b.Cleanup(func() { _ = l.Close() })
		s := &service{l: l}
		doms, _, err := newDomains([]policy.Config{cfg}, []string{path})
		require.NoError(b, err)
		s.rules.Store(doms)
		return s
	}
	b.Run("service", func(b *testing.B) {
		s := newService(b)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			resp, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)])
			if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
				b.Fatal(resp, err)
			}
		}
	})
	b.Run("grpc-loopback", func(b *testing.B) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(b, err)
		srv := grpc.NewServer()
		rlspb.RegisterRateLimitServiceServer(srv, newService(b))
		go func() { _ = srv.Serve(lis) }()
		b.Cleanup(srv.Stop)
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(b, err)
		b.Cleanup(func() { _ = conn.Close() })
		c := rlspb.NewRateLimitServiceClient(conn)
		var next atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(4) // 8 callers on 2 cores
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				resp, err := c.ShouldRateLimit(ctx, reqs[next.Add(1)%int64(len(reqs))])
				if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
					b.Error(resp, err)
					return
				}
			}
		})
	})
}
