package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/policy"
)

// slowServer is sluice.test.Slow: Wait (unary) enters, then returns when
// the gate opens or the call ends, or panics when asked "panic"; Hold (a
// stream) enters, then returns when the client closes its side. Each
// sends on returned once the limiter's interceptor has returned.
type slowServer struct {
	entered  chan string
	gate     chan struct{}
	returned chan string
}

func newSlowServer() *slowServer {
	return &slowServer{entered: make(chan string, 8), gate: make(chan struct{}), returned: make(chan string, 8)}
}

var slowDesc = grpc.ServiceDesc{
	ServiceName: "sluice.test.Slow",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Wait", Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(*slowServer)
		h := func(ctx context.Context, req any) (any, error) {
			if req.(*wrapperspb.StringValue).Value == "panic" {
				panic("handler failed")
			}
			s.entered <- "Wait"
			select {
			case <-s.gate:
			case <-ctx.Done():
			}
			return req, nil
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/sluice.test.Slow/Wait"}, h)
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Hold", ClientStreams: true, ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		srv.(*slowServer).entered <- "Hold"
		for {
			if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				return nil
			}
		}
	}}},
}

// serveSlow runs a real grpc.Server with sluice.test.Slow behind a
// recovering interceptor (a panic is codes.Internal) and the limiter's,
// on a loopback port, and returns a connection to it.
func serveSlow(t *testing.T, s *slowServer, cfg grpclimit.Config) *grpc.ClientConn {
	t.Helper()
	cfg.ErrorMode = grpclimit.ErrorReject
	unary, err := grpclimit.UnaryServerInterceptor(cfg)
	require.NoError(t, err)
	stream, err := grpclimit.StreamServerInterceptor(cfg)
	require.NoError(t, err)
	recoverU := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (_ any, err error) {
		defer func() {
			if recover() != nil {
				err = status.Error(codes.Internal, "panic")
			}
			s.returned <- "Wait"
		}()
		return h(ctx, req)
	}
	recoverS := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		defer func() { s.returned <- "Hold" }()
		return h(srv, ss)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recoverU, unary), grpc.ChainStreamInterceptor(recoverS, stream))
	srv.RegisterService(&slowDesc, s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// recv returns the next value of ch, and fails the test if none comes
// within a minute (a slot never released would otherwise hang it).
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatal("nothing received within a minute")
		panic("unreachable")
	}
}

// slotsFree reports whether key has n slots of rule free, taking and then
// releasing them.
func slotsFree(t *testing.T, lim *sluice.Limiter, rule, key string, n int) bool {
	t.Helper()
	var slots []sluice.Slot
	defer func() {
		for _, s := range slots {
			s.Release()
		}
	}()
	for range n {
		s, d, err := lim.Acquire(context.Background(), rule, key)
		require.NoError(t, err)
		if !d.Allowed {
			return false
		}
		slots = append(slots, s)
	}
	return true
}

func wait(ctx context.Context, conn *grpc.ClientConn, arg string) (*status.Status, metadata.MD) {
	var hdr metadata.MD
	err := conn.Invoke(ctx, "/sluice.test.Slow/Wait", wrapperspb.String(arg), new(wrapperspb.StringValue), grpc.Header(&hdr))
	return status.Convert(err), hdr
}

// checkBusy checks a refusal for want slots of rule.
func checkBusy(t *testing.T, st *status.Status, hdr metadata.MD, rule string) {
	t.Helper()
	require.Equal(t, codes.ResourceExhausted, st.Code(), st.Message())
	assert.Contains(t, st.Message(), `"`+rule+`"`)
	assert.Equal(t, []string{"1"}, hdr.Get("retry-after"))
	assert.Empty(t, hdr.Get("ratelimit"))
	assert.Empty(t, hdr.Get("ratelimit-policy"))
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	require.NotNil(t, retry)
	assert.Equal(t, int64(1), retry.RetryDelay.Seconds)
}

// TestInFlightUnary sends 5 slow calls at once under a limit of 2 in
// flight: exactly 2 run together, 3 fail with ResourceExhausted, and once
// the 2 return their slots are free again.
func TestInFlightUnary(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "slots", Limit: 2, InFlight: true})
	s := newSlowServer()
	conn := serveSlow(t, s, grpclimit.Config{Limiter: lim, Rule: "slots"})
	type result struct {
		st  *status.Status
		hdr metadata.MD
	}
	results := make(chan result, 5)
	for range 5 {
		go func() {
			st, hdr := wait(context.Background(), conn, "hi")
			results <- result{st, hdr}
		}()
	}
	for range 3 {
		res := recv(t, results)
		checkBusy(t, res.st, res.hdr, "slots")
	}
	recv(t, s.entered)
	recv(t, s.entered)
	assert.False(t, slotsFree(t, lim, "slots", "127.0.0.1", 1), "the 2 running calls hold both slots")
	close(s.gate)
	for range 2 {
		res := recv(t, results)
		assert.Equal(t, codes.OK, res.st.Code(), res.st.Message())
	}
	for range 5 {
		recv(t, s.returned)
	}
	assert.True(t, slotsFree(t, lim, "slots", "127.0.0.1", 2), "the slots are free once the handlers returned")
}

// TestInFlightReleased checks that a call's slot is given back when its
// handler panics and when the client cancels it.
func TestInFlightReleased(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "one", Limit: 1, InFlight: true})
	s := newSlowServer()
	conn := serveSlow(t, s, grpclimit.Config{Limiter: lim, Rule: "one"})

	for range 3 {
		st, _ := wait(context.Background(), conn, "panic")
		assert.Equal(t, codes.Internal, st.Code())
		recv(t, s.returned)
	}
	assert.True(t, slotsFree(t, lim, "one", "127.0.0.1", 1), "a panicking handler released its slot")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *status.Status, 1)
	go func() {
		st, _ := wait(ctx, conn, "hi")
		done <- st
	}()
	recv(t, s.entered)
	st, hdr := wait(context.Background(), conn, "hi")
	checkBusy(t, st, hdr, "one")
	recv(t, s.returned)
	cancel()
	assert.Equal(t, codes.Canceled, recv(t, done).Code())
	recv(t, s.returned)
	assert.True(t, slotsFree(t, lim, "one", "127.0.0.1", 1), "a cancelled call released its slot")
}

// TestInFlightStream checks that a stream holds its slot while it is open
// (another stream or a unary call of the same rule is refused), and gives
// it back when it ends.
func TestInFlightStream(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "one", Limit: 1, InFlight: true})
	s := newSlowServer()
	conn := serveSlow(t, s, grpclimit.Config{Limiter: lim, Rule: "one"})
	desc := &grpc.StreamDesc{StreamName: "Hold", ClientStreams: true, ServerStreams: true}

	open, err := conn.NewStream(context.Background(), desc, "/sluice.test.Slow/Hold")
	require.NoError(t, err)
	require.NoError(t, open.SendMsg(wrapperspb.String("hi")))
	recv(t, s.entered)

	other, err := conn.NewStream(context.Background(), desc, "/sluice.test.Slow/Hold")
	require.NoError(t, err)
	require.NoError(t, other.CloseSend())
	err = other.RecvMsg(new(wrapperspb.StringValue))
	hdr, _ := other.Header()
	checkBusy(t, status.Convert(err), hdr, "one")
	recv(t, s.returned)
	st, hdr := wait(context.Background(), conn, "hi")
	checkBusy(t, st, hdr, "one")
	recv(t, s.returned)
	assert.False(t, slotsFree(t, lim, "one", "127.0.0.1", 1), "the open stream holds the slot")

	require.NoError(t, open.CloseSend())
	assert.True(t, errors.Is(open.RecvMsg(new(wrapperspb.StringValue)), io.EOF))
	recv(t, s.returned)
	assert.True(t, slotsFree(t, lim, "one", "127.0.0.1", 1), "the ended stream released its slot")
}

// TestInFlightConfig checks what the constructors refuse, and that a rate
// rule is checked before the slot is taken.
func TestInFlightConfig(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t,
		policy.Rule{Name: "rate", Limit: 1, Window: 60e9},
		policy.Rule{Name: "one", Limit: 1, InFlight: true})
	cost := func(context.Context, string) int64 { return 2 }
	for _, tc := range []struct {
		name  string
		route grpclimit.Route
		want  string
	}{
		{"unknown", grpclimit.Route{Pattern: "*", Rules: []grpclimit.Rule{{Name: "nope"}}}, `rule "nope": the limiter has no such rule`},
		{"cost on slots only", grpclimit.Route{Pattern: "*", Rules: []grpclimit.Rule{{Name: "one"}}, Cost: cost}, "a Cost with only InFlight rules"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := grpclimit.UnaryServerInterceptor(grpclimit.Config{Limiter: lim, Routes: []grpclimit.Route{tc.route}, ErrorMode: grpclimit.ErrorReject})
			assert.ErrorContains(t, err, tc.want)
		})
	}

	s := newSlowServer()
	close(s.gate)
	conn := serveSlow(t, s, grpclimit.Config{Limiter: lim, Routes: []grpclimit.Route{{Pattern: "*", Rules: []grpclimit.Rule{{Name: "rate"}, {Name: "one"}}}}})
	st, hdr := wait(context.Background(), conn, "hi")
	assert.Equal(t, codes.OK, st.Code(), st.Message())
	assert.Equal(t, []string{`"rate";q=1;w=60`}, hdr.Get("ratelimit-policy"))
	st, _ = wait(context.Background(), conn, "hi")
	assert.Equal(t, codes.ResourceExhausted, st.Code())
	assert.Contains(t, st.Message(), `rate limit "rate"`)
	assert.True(t, slotsFree(t, lim, "one", "127.0.0.1", 1), "a denied call takes no slot")
}
