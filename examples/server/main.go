// Command server is sluice in front of HTTP: two instances of a
// rate-limited API on loopback ports, sharing one Redis, so that a client
// sees one fleet-wide limit whichever instance it reaches.
//
//	go run ./examples/server
//	curl -i http://127.0.0.1:8081/api/hello
//
// Each instance has its own sluice.Limiter and its own http.Server; both
// run in this one process (run the command twice with one -listen address
// each and the same -redis for two processes). With no -redis the command
// starts an embedded Redis stand-in (miniredis, in process) on a loopback
// port: the limits are shared the same way, with no setup. Requests are
// limited per client IP (the peer address: put ClientIP with your proxies'
// addresses behind a load balancer) by the rule "api", 10 per minute, and
// POST /login by "login", 3 per minute: the rules of rules.yaml, built in.
// With -rules FILE every instance reads its rules from FILE instead and
// follows its changes (Limiter.WatchFile).
package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		log.Fatal(err)
	}
}

// rulesYAML is rules.yaml, the example's limits, built in.
//
//go:embed rules.yaml
var rulesYAML []byte

// run serves until ctx ends. ready, if not nil, receives the listening
// addresses once every instance is up.
func run(ctx context.Context, args []string, logw io.Writer, ready func(addrs []string)) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(logw)
	listen := fs.String("listen", "127.0.0.1:8081,127.0.0.1:8082", "comma-separated `addresses`, one instance each")
	redisAddr := fs.String("redis", "", "Redis `host:port` shared by the instances; empty: an embedded miniredis stand-in")
	rulesFile := fs.String("rules", "", "rules `file` (sluice's YAML or an envoy ratelimit config), watched for changes; empty: the built-in rules.yaml")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := policy.Load(bytes.NewReader(rulesYAML))
	if *rulesFile != "" {
		cfg, err = policy.LoadFile(*rulesFile)
	}
	if err != nil {
		return err
	}
	addr := *redisAddr
	if addr == "" {
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("starting the embedded miniredis: %w", err)
		}
		defer m.Close()
		addr = m.Addr()
		fmt.Fprintf(logw, "server: no -redis: embedded miniredis stand-in on %s\n", addr)
	}
	var (
		wg    sync.WaitGroup
		addrs []string
		errs  = make(chan error, 8)
	)
	for i, a := range strings.Split(*listen, ",") {
		srv, lis, cleanup, err := instance(ctx, i, addr, a, cfg.Rules, *rulesFile, logw)
		if err != nil {
			return err
		}
		defer cleanup()
		addrs = append(addrs, lis.Addr().String())
		fmt.Fprintf(logw, "server: instance %d on http://%s/api/hello\n", i+1, lis.Addr())
		wg.Go(func() {
			if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		})
		wg.Go(func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		})
	}
	if ready != nil {
		ready(addrs)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// instance builds one instance: its limiter on the shared Redis with rules
// (kept in step with rulesFile, if set), its middleware and its server,
// listening on addr.
func instance(ctx context.Context, i int, redisAddr, addr string, rules []policy.Rule, rulesFile string, logw io.Writer) (*http.Server, net.Listener, func(), error) {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	lim, err := sluice.New(sluice.Options{
		Redis:      rdb,
		Prefix:     "example",
		InstanceID: fmt.Sprintf("example-%d-%d", os.Getpid(), i+1),
		Logger:     slog.New(slog.NewTextHandler(logw, nil)).With("instance", i+1),
	}, rules...)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, nil, err
	}
	cleanup := func() { _ = lim.Close(); _ = rdb.Close() }
	if rulesFile != "" {
		if err := lim.WatchFile(ctx, rulesFile, sluice.WatchOptions{}); err != nil {
			cleanup()
			return nil, nil, nil, err
		}
	}
	limit, err := httplimit.New(httplimit.Config{
		Limiter: lim,
		Routes: []httplimit.Route{
			{Pattern: "/api/", Rules: []httplimit.Rule{{Name: "api"}}},
			{Pattern: "POST /login", Rules: []httplimit.Rule{{Name: "login"}}},
		},
		Key:       httplimit.PeerIP(),
		ErrorMode: httplimit.ErrorReject, // a check that cannot be made is a 503, never a silent pass
	})
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from instance %d\n", i+1)
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "welcome")
	})
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	return &http.Server{Handler: limit(mux), ReadHeaderTimeout: 5 * time.Second}, lis, cleanup, nil
}
