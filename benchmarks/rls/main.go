// Command rlsbench drives envoy rate limit services (envoy's
// envoy.service.ratelimit.v3 API, through its generated Go client) with
// concurrent callers for a bounded time, and prints decisions/s, latency
// percentiles and, given the limit, the fleet's over-admission per key. It
// is the client of run.sh, which runs it against `sluice serve` and
// envoyproxy/ratelimit side by side.
//
//	rlsbench -targets 127.0.0.1:8081[,127.0.0.1:8082] -domain bench -descriptor bench \
//	         -keys 1000 -callers 8 -duration 5s [-limit 1000] [-label NAME]
//
// Caller i sends to target i mod len(targets) and walks the keys
// "<key-prefix><j>" from j = i in steps of the callers, so every key is
// asked of every target. Output: one line of JSON on stdout.
//
//	rlsbench -free-port            prints a free loopback TCP port
//	rlsbench -wait-tcp ADDR        waits (at most 30 s) until ADDR accepts
//	rlsbench -serve-noop ADDR      serves the API on ADDR, answering OK to
//	                               every request without deciding anything:
//	                               the floor of gRPC alone, until SIGTERM
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// result is what one run measured.
type result struct {
	Label     string  `json:"label"`
	Targets   int     `json:"targets"`
	Callers   int     `json:"callers"`
	Keys      int     `json:"keys"`
	Seconds   float64 `json:"seconds"`
	Decisions int64   `json:"decisions"`
	PerSecond float64 `json:"per_second"`
	OK        int64   `json:"ok"`
	Over      int64   `json:"over_limit"`
	Errors    int64   `json:"errors"`
	FirstErr  string  `json:"first_error,omitempty"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	P999us    float64 `json:"p999_us"`
	// With -limit: the most and the mean admitted per key, and the
	// over-admission (admitted past the limit) as a fraction of it.
	Limit         int64   `json:"limit,omitempty"`
	MaxAdmitted   int64   `json:"max_admitted,omitempty"`
	MeanAdmitted  float64 `json:"mean_admitted,omitempty"`
	MaxOverPct    float64 `json:"max_over_pct"`
	MeanOverPct   float64 `json:"mean_over_pct"`
	CrossedWindow bool    `json:"crossed_window,omitempty"`
	WindowSeconds float64 `json:"window_seconds,omitempty"`
	KeysSaturated int     `json:"keys_saturated,omitempty"`
}

func main() {
	targets := flag.String("targets", "", "comma-separated gRPC `ADDR`s of the rate limit services")
	domain := flag.String("domain", "bench", "the request's domain")
	descriptor := flag.String("descriptor", "bench", "the descriptor entry's key")
	keyPrefix := flag.String("key-prefix", "k", "the prefix of the entry's values")
	keys := flag.Int("keys", 1000, "how many distinct values (keys)")
	callers := flag.Int("callers", 8, "concurrent callers")
	duration := flag.Duration("duration", 5*time.Second, "how long to call")
	limit := flag.Int64("limit", 0, "the descriptor's limit per window: report the over-admission per key")
	window := flag.Duration("window", time.Hour, "the descriptor's window (for -limit: a run that crosses a window's boundary is flagged)")
	label := flag.String("label", "", "the run's name in the output")
	freePort := flag.Bool("free-port", false, "print a free loopback TCP port and exit")
	waitTCP := flag.String("wait-tcp", "", "wait until `ADDR` accepts TCP connections (at most 30 s) and exit")
	noop := flag.String("serve-noop", "", "serve the API on `ADDR`, answering OK without deciding, until SIGTERM")
	flag.Parse()

	switch {
	case *noop != "":
		if err := serveNoop(*noop); err != nil {
			fail(err)
		}
		return
	case *freePort:
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fail(err)
		}
		fmt.Println(lis.Addr().(*net.TCPAddr).Port)
		_ = lis.Close()
		return
	case *waitTCP != "":
		deadline := time.Now().Add(30 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", *waitTCP, time.Second)
			if err == nil {
				_ = c.Close()
				return
			}
			if time.Now().After(deadline) {
				fail(fmt.Errorf("%s does not accept connections: %w", *waitTCP, err))
			}
			time.Sleep(50 * time.Millisecond)
		}
	case *targets == "" || *keys < 1 || *callers < 1:
		fail(fmt.Errorf("-targets, -keys ≥ 1 and -callers ≥ 1 are required"))
	}
	r, err := drive(strings.Split(*targets, ","), *domain, *descriptor, *keyPrefix, *keys, *callers, *duration, *limit, *window)
	if err != nil {
		fail(err)
	}
	r.Label = *label
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "rlsbench:", err)
	os.Exit(1)
}

// drive runs the callers and measures them.
func drive(addrs []string, domain, descriptor, keyPrefix string, keys, callers int, d time.Duration, limit int64, window time.Duration) (result, error) {
	clients := make([]rlspb.RateLimitServiceClient, len(addrs))
	for i, a := range addrs {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return result{}, err
		}
		defer conn.Close()
		clients[i] = rlspb.NewRateLimitServiceClient(conn)
		// One call on another key opens the connection before the clock
		// starts.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = clients[i].ShouldRateLimit(ctx, request(domain, descriptor, "warm-up"), grpc.WaitForReady(true))
		cancel()
		if err != nil {
			return result{}, fmt.Errorf("%s: %w", a, err)
		}
	}
	reqs := make([]*rlspb.RateLimitRequest, keys)
	for j := range reqs {
		reqs[j] = request(domain, descriptor, fmt.Sprint(keyPrefix, j))
	}
	admitted := make([]atomic.Int64, keys)
	var ok, over, errs atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for i := range callers {
		c := clients[i%len(clients)]
		lat[i] = make([]time.Duration, 0, 1<<16)
		wg.Go(func() {
			ctx := context.Background()
			for j := i % keys; ; j = (j + callers) % keys {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				resp, err := c.ShouldRateLimit(ctx, reqs[j])
				lat[i] = append(lat[i], time.Since(t0))
				switch {
				case err != nil:
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				case resp.OverallCode == rlspb.RateLimitResponse_OK:
					ok.Add(1)
					admitted[j].Add(1)
				default:
					over.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := result{
		Targets: len(addrs), Callers: callers, Keys: keys,
		Seconds: elapsed.Seconds(), Decisions: int64(len(all)),
		PerSecond: float64(len(all)) / elapsed.Seconds(),
		OK:        ok.Load(), Over: over.Load(), Errors: errs.Load(),
		P50us: pct(all, 0.50), P99us: pct(all, 0.99), P999us: pct(all, 0.999),
	}
	if e, ok := firstErr.Load().(string); ok {
		r.FirstErr = e
	}
	if limit > 0 {
		r.Limit, r.WindowSeconds = limit, window.Seconds()
		r.CrossedWindow = start.Truncate(window) != time.Now().Truncate(window)
		var sum, overSum int64
		for j := range admitted {
			a := admitted[j].Load()
			sum += a
			r.MaxAdmitted = max(r.MaxAdmitted, a)
			overSum += max(a-limit, 0)
			if a >= limit {
				r.KeysSaturated++
			}
		}
		r.MeanAdmitted = float64(sum) / float64(keys)
		r.MaxOverPct = 100 * float64(max(r.MaxAdmitted-limit, 0)) / float64(limit)
		r.MeanOverPct = 100 * float64(overSum) / float64(int64(keys)*limit)
	}
	return r, nil
}

func request(domain, key, value string) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*extrl.RateLimitDescriptor{{
		Entries: []*extrl.RateLimitDescriptor_Entry{{Key: key, Value: value}},
	}}}
}

// pct is the q-quantile of sorted latencies, in µs.
func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(int(q*float64(len(sorted))), len(sorted)-1)
	return float64(sorted[i].Nanoseconds()) / 1000
}

// noopService answers every request OK, with one OK status per
// descriptor: what gRPC and protobuf cost with no decision at all.
type noopService struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (noopService) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(req.Descriptors))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
	}
	return resp, nil
}

// serveNoop serves noopService on addr until SIGINT or SIGTERM.
func serveNoop(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(srv, noopService{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	return srv.Serve(lis)
}
