// Command grpcserver is sluice in front of gRPC: a server whose methods are
// limited by grpclimit, with layered rules, an identity hook and method
// patterns, and a small client that shows what the limiter answers.
//
//	go run ./examples/grpcserver &
//	go run ./examples/grpcserver -call /demo.Greeter/Hello -key key-acme -n 5
//
// The server offers the standard health service and demo.Greeter, a
// service without generated code (its methods Hello and Shout take and
// return a google.protobuf.StringValue). Its limits (see routes):
//
//   - "*", every method: "per-ip", 10 a minute per client IP.
//   - "/demo.Greeter/*": "per-ip" and "tenant", 4 a minute per tenant,
//     checked together (a denial by one consumes nothing from the other).
//   - "/demo.Greeter/Shout": "per-ip", "tenant" and "shout", 1 a minute per
//     tenant. The most specific pattern is the call's route: Shout's own
//     pattern replaces its service's, so it lists every rule it checks.
//   - "/grpc.health.v1.Health/*": not limited.
//
// The tenant comes from the identity hook tenantKey: the x-api-key
// metadata, looked up in a table of known keys. A call without a known key
// ends with codes.Unauthenticated and is never counted.
//
// With -call the command is the client instead: it calls the method -n
// times on -addr and prints, for each call, the status and the rate-limit
// metadata and error details the server sent.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
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

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil); err != nil {
		log.Fatal(err)
	}
}

// run is the command: the server until ctx ends, or with -call the client.
// ready, if not nil, receives the server's listening address once it is up.
func run(ctx context.Context, args []string, out, logw io.Writer, ready func(addr string)) error {
	fs := flag.NewFlagSet("grpcserver", flag.ContinueOnError)
	fs.SetOutput(logw)
	listen := fs.String("listen", "127.0.0.1:50051", "the server's `address`")
	method := fs.String("call", "", "client mode: the full `method` to call (/demo.Greeter/Hello, /demo.Greeter/Shout, /grpc.health.v1.Health/Check)")
	addr := fs.String("addr", "127.0.0.1:50051", "client mode: the server's `address`")
	key := fs.String("key", "", "client mode: the x-api-key metadata to send (key-acme, key-globex); empty: none")
	n := fs.Int("n", 1, "client mode: how many calls to make")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *method != "" {
		return callN(ctx, out, *addr, *method, *key, *n)
	}
	return serve(ctx, *listen, logw, ready)
}

// The example's rules. With sluice.Options.Redis set, every instance of
// the server would share them fleet-wide (examples/server shows that).
var rules = []policy.Rule{
	{Name: "per-ip", Limit: 10, Window: time.Minute},
	{Name: "tenant", Limit: 4, Window: time.Minute},
	{Name: "shout", Limit: 1, Window: time.Minute},
}

// tenants are the API keys the example knows, and their tenants. A real
// service would look the key up in its own store.
var tenants = map[string]string{"key-acme": "acme", "key-globex": "globex"}

// tenantKey is the identity hook: the tenant of the call's API key. Any
// function of the call's context works (metadata, the peer and its TLS
// AuthInfo, what an authentication interceptor stored).
func tenantKey(ctx context.Context, _ string) (string, error) {
	vs := metadata.ValueFromIncomingContext(ctx, "x-api-key")
	if len(vs) == 0 {
		return "", fmt.Errorf("%w: no x-api-key", grpclimit.ErrNoIdentity)
	}
	t, ok := tenants[vs[0]]
	if !ok {
		return "", fmt.Errorf("%w: unknown x-api-key", grpclimit.ErrNoIdentity)
	}
	return "tenant:" + t, nil
}

// routes are the example's limits, by method pattern.
func routes() []grpclimit.Route {
	perIP := grpclimit.Rule{Name: "per-ip"} // Config.Key: the peer IP
	tenant := grpclimit.Rule{Name: "tenant", Key: tenantKey}
	return []grpclimit.Route{
		{Pattern: "*", Rules: []grpclimit.Rule{perIP}},
		{Pattern: "/demo.Greeter/*", Rules: []grpclimit.Rule{perIP, tenant}},
		{Pattern: "/demo.Greeter/Shout", Rules: []grpclimit.Rule{perIP, tenant, {Name: "shout", Key: tenantKey}}},
		{Pattern: "/grpc.health.v1.Health/*", Unlimited: true},
	}
}

// serve runs the server on listen until ctx ends.
func serve(ctx context.Context, listen string, logw io.Writer, ready func(string)) error {
	lim, err := sluice.New(sluice.Options{}, rules...)
	if err != nil {
		return err
	}
	defer lim.Close()
	cfg := grpclimit.Config{
		Limiter:   lim,
		Routes:    routes(),
		Key:       grpclimit.PeerIP(), // behind a proxy: grpclimit.ClientIP
		ErrorMode: grpclimit.ErrorReject,
	}
	unary, err := grpclimit.UnaryServerInterceptor(cfg)
	if err != nil {
		return err
	}
	stream, err := grpclimit.StreamServerInterceptor(cfg)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	srv.RegisterService(&greeterDesc, struct{}{})
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(logw, "grpcserver: serving demo.Greeter and grpc.health.v1.Health on %s\n", lis.Addr())
	if ready != nil {
		ready(lis.Addr().String())
	}
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// greeterDesc is demo.Greeter, written by hand: Hello answers "hello",
// Shout "HELLO".
var greeterDesc = grpc.ServiceDesc{
	ServiceName: "demo.Greeter",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Hello", Handler: greet("Hello", "hello")},
		{MethodName: "Shout", Handler: greet("Shout", "HELLO")},
	},
}

func greet(method, reply string) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(context.Context, any) (any, error) { return wrapperspb.String(reply), nil }
		if interceptor == nil {
			return h(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/demo.Greeter/" + method}, h)
	}
}

// fields are the rate-limit metadata the client prints, in order.
var fields = []string{"ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after"}

// callN is the client: n calls of method on addr, each printed to out.
func callN(ctx context.Context, out io.Writer, addr, method, key string, n int) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
	}
	for i := range n {
		var hdr metadata.MD
		var reply string
		if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
			resp := new(healthpb.HealthCheckResponse)
			err = conn.Invoke(ctx, method, &healthpb.HealthCheckRequest{}, resp, grpc.Header(&hdr))
			reply = resp.GetStatus().String()
		} else {
			resp := new(wrapperspb.StringValue)
			err = conn.Invoke(ctx, method, wrapperspb.String("hi"), resp, grpc.Header(&hdr))
			reply = resp.GetValue()
		}
		st := status.Convert(err)
		if st.Code() == 0 {
			fmt.Fprintf(out, "call %d: OK %q\n", i+1, reply)
		} else {
			fmt.Fprintf(out, "call %d: %v: %s\n", i+1, st.Code(), st.Message())
		}
		for _, f := range fields {
			for _, v := range hdr.Get(f) {
				fmt.Fprintf(out, "  %s: %s\n", f, v)
			}
		}
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Fprintf(out, "  RetryInfo: retry in %v\n", d.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				for _, v := range d.GetViolations() {
					fmt.Fprintf(out, "  QuotaFailure: %s: %s\n", v.GetSubject(), v.GetDescription())
				}
			}
		}
	}
	return nil
}
