package main

import (
	"context"
	"strings"
	"testing"
	"time"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestTranscript is the exchange docs/envoy.md shows: run it with -v to
// print it (requests and responses as protojson).
func TestTranscript(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "ratelimit.yaml", `domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 2
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 100
`)
	s := startServe(t, "-config", cfg)
	c := client(t, s.addr)
	show := func(m proto.Message) string {
		b, err := protojson.MarshalOptions{}.Marshal(m)
		require.NoError(t, err)
		return strings.Join(strings.Fields(string(b)), " ")
	}
	var log strings.Builder
	for _, req := range []*rlspb.RateLimitRequest{
		{Domain: "edge", Descriptors: []*extrl.RateLimitDescriptor{desc("remote_address", "10.0.0.7"), desc("user", "alice")}},
		{Domain: "edge", Descriptors: []*extrl.RateLimitDescriptor{desc("remote_address", "10.0.0.7")}},
		{Domain: "edge", Descriptors: []*extrl.RateLimitDescriptor{desc("remote_address", "10.0.0.7")}},
		{Domain: "edge", Descriptors: []*extrl.RateLimitDescriptor{desc("path", "/health")}},
		{Domain: "edge", Descriptors: []*extrl.RateLimitDescriptor{desc("", "x")}},
	} {
		log.WriteString("> " + show(req) + "\n")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := c.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil {
			log.WriteString("< error: " + err.Error() + "\n")
			continue
		}
		log.WriteString("< " + show(resp) + "\n")
	}
	t.Logf("transcript:\n%s", log.String())
	require.Contains(t, log.String(), `"overallCode":"OVER_LIMIT"`)
	require.Contains(t, log.String(), "code = InvalidArgument")
}
