package grpclimit_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/policy"
)

// start runs a real grpc.Server with the health service behind the
// interceptors of cfg on a loopback port and returns a real client to it.
func start(t *testing.T, cfg grpclimit.Config) healthpb.HealthClient {
	t.Helper()
	return healthpb.NewHealthClient(serve(t, cfg, nil, nil))
}

// serve runs a real grpc.Server, with the health service and the test's
// Echo service behind the interceptors of cfg, on a loopback TCP port, and
// returns a real connection to it. creds, if not nil, are the server's
// transport credentials and dial's the client's (nil: insecure).
func serve(t *testing.T, cfg grpclimit.Config, creds credentials.TransportCredentials, dial credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	if cfg.ErrorMode == 0 {
		cfg.ErrorMode = grpclimit.ErrorReject
	}
	unary, err := grpclimit.UnaryServerInterceptor(cfg)
	require.NoError(t, err)
	stream, err := grpclimit.StreamServerInterceptor(cfg)
	require.NoError(t, err)
	opts := []grpc.ServerOption{grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream)}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	srv.RegisterService(&echoDesc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	if dial == nil {
		dial = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(dial))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// echoDesc is a service without generated code: sluice.test.Echo, whose
// methods Say and Shout return their google.protobuf.StringValue.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "sluice.test.Echo",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Say", Handler: echo("Say")}, {MethodName: "Shout", Handler: echo("Shout")}},
}

func echo(method string) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(_ context.Context, req any) (any, error) { return req, nil }
		if interceptor == nil {
			return h(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/sluice.test.Echo/" + method}, h)
	}
}

// call invokes a unary method of conn (a health Check or an Echo method)
// and returns its status code and header metadata.
func call(t *testing.T, ctx context.Context, conn *grpc.ClientConn, method string) (*status.Status, metadata.MD) {
	t.Helper()
	var hdr metadata.MD
	var err error
	if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		err = conn.Invoke(ctx, method, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}, grpc.Header(&hdr))
	} else {
		err = conn.Invoke(ctx, method, wrapperspb.String("hi"), new(wrapperspb.StringValue), grpc.Header(&hdr))
	}
	st, ok := status.FromError(err)
	require.True(t, ok, "%v", err)
	return st, hdr
}

func newLimiter(t *testing.T, rules ...policy.Rule) *sluice.Limiter {
	t.Helper()
	lim, err := sluice.New(sluice.Options{}, rules...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	return lim
}

func item(t *testing.T, md metadata.MD, key string) httpsfv.Item {
	t.Helper()
	list, err := httpsfv.UnmarshalList(md.Get(key))
	require.NoError(t, err, "%s: %q", key, md.Get(key))
	require.Len(t, list, 1)
	it, ok := list[0].(httpsfv.Item)
	require.True(t, ok)
	return it
}

func param(t *testing.T, it httpsfv.Item, k string) int64 {
	t.Helper()
	v, ok := it.Params.Get(k)
	require.True(t, ok, k)
	n, ok := v.(int64)
	require.True(t, ok, k)
	return n
}

func TestUnary(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "rpc", Limit: 2, Window: time.Minute})
	c := start(t, grpclimit.Config{Limiter: lim, Rule: "rpc"})
	ctx := t.Context()
	for i := range 2 {
		var hdr metadata.MD
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		require.NoError(t, err)
		pol := item(t, hdr, "ratelimit-policy")
		assert.Equal(t, "rpc", pol.Value)
		assert.EqualValues(t, 2, param(t, pol, "q"))
		assert.EqualValues(t, 60, param(t, pol, "w"))
		assert.EqualValues(t, 1-i, param(t, item(t, hdr, "ratelimit"), "r"))
		assert.Equal(t, []string{"2"}, hdr.Get("x-ratelimit-limit"))
		assert.Equal(t, []string{strconv.Itoa(1 - i)}, hdr.Get("x-ratelimit-remaining"))
	}
	var hdr metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	st, ok := status.FromError(err)
	require.True(t, ok)
	assert.Equal(t, codes.ResourceExhausted, st.Code())
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.QuotaFailure:
			quota = d
		}
	}
	require.NotNil(t, retry, "RetryInfo")
	require.NotNil(t, quota, "QuotaFailure")
	delay := retry.GetRetryDelay().AsDuration()
	assert.True(t, delay >= time.Second && delay <= 66*time.Second, "retry delay %v", delay)
	require.Len(t, quota.GetViolations(), 1)
	assert.Equal(t, "rule:rpc", quota.GetViolations()[0].GetSubject())
	assert.EqualValues(t, 0, param(t, item(t, hdr, "ratelimit"), "r"), "the denial carries the fields too")
	assert.Equal(t, []string{strconv.Itoa(int(delay / time.Second))}, hdr.Get("retry-after"))
}

func TestStream(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "watch", Limit: 1, Window: time.Minute})
	c := start(t, grpclimit.Config{Limiter: lim, Methods: map[string]string{healthpb.Health_Watch_FullMethodName: "watch"}})
	ctx := t.Context()
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = s.Recv()
	require.NoError(t, err, "the first stream is admitted")
	hdr, err := s.Header()
	require.NoError(t, err)
	assert.EqualValues(t, 0, param(t, item(t, hdr, "ratelimit"), "r"))
	s, err = c.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = s.Recv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the second is denied")
	for range 3 {
		_, err = c.Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "Check has no rule: unlimited")
	}
}

func TestMetadataKey(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "rpc", Limit: 1, Window: time.Minute})
	c := start(t, grpclimit.Config{Limiter: lim, Rule: "rpc", Key: grpclimit.Metadata("x-api-key")})
	call := func(key string) codes.Code {
		ctx := t.Context()
		if key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
		}
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		return status.Code(err)
	}
	assert.Equal(t, codes.OK, call("a"))
	assert.Equal(t, codes.ResourceExhausted, call("a"))
	assert.Equal(t, codes.OK, call("b"), "another key, another bucket")
	assert.Equal(t, codes.Unauthenticated, call(""), "no identity is answered, not bucketed")
}

func TestErrorMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode grpclimit.ErrorMode
		want codes.Code
	}{{grpclimit.ErrorReject, codes.Unavailable}, {grpclimit.ErrorServe, codes.OK}} {
		lim := newLimiter(t, policy.Rule{Name: "rpc", Limit: 5, Window: time.Minute})
		reported := make(chan error, 1)
		c := start(t, grpclimit.Config{Limiter: lim, Rule: "rpc", ErrorMode: tc.mode,
			ReportError: func(_ context.Context, _ string, err error) { reported <- err }})
		require.NoError(t, lim.Close())
		_, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{})
		assert.Equal(t, tc.want, status.Code(err))
		assert.ErrorIs(t, <-reported, sluice.ErrClosed)
	}
}

func TestConfigRefused(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "rpc", Limit: 5, Window: time.Minute})
	for _, tc := range []struct {
		cfg  grpclimit.Config
		want string
	}{
		{grpclimit.Config{Rule: "rpc", ErrorMode: grpclimit.ErrorReject}, "Limiter is nil"},
		{grpclimit.Config{Limiter: lim, Rule: "rpc"}, "ErrorMode"},
		{grpclimit.Config{Limiter: lim, Rule: "nope", ErrorMode: grpclimit.ErrorReject}, `"nope"`},
		{grpclimit.Config{Limiter: lim, ErrorMode: grpclimit.ErrorReject}, "no rule"},
	} {
		_, err := grpclimit.UnaryServerInterceptor(tc.cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
}
