package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// Bounds on one ShouldRateLimit request: a request past them is refused
// with InvalidArgument before anything is matched or counted, so a hostile
// request costs a bounded amount of work.
const (
	// maxDescriptors is the most descriptors in one request.
	maxDescriptors = 64
	// maxEntries is the most entries in one descriptor: the deepest an
	// envoy configuration nests.
	maxEntries = policy.MaxDescriptorDepth
	// maxValue is the longest key or value of an entry, in bytes.
	maxValue = 1024
	// maxMessage is the largest request message gRPC accepts, in bytes
	// (past it: ResourceExhausted): above the largest request within the
	// bounds above.
	maxMessage = 4 << 20
)

// DefaultListen is serve's default -listen address.
const DefaultListen = "127.0.0.1:8081"

// shutdownGrace bounds how long serve waits for requests under way to
// finish on SIGINT or SIGTERM before it closes their connections.
const shutdownGrace = 10 * time.Second

// service answers envoy's RateLimitService from a sluice Limiter.
type service struct {
	rlspb.UnimplementedRateLimitServiceServer
	l       *sluice.Limiter
	headers headerSet               // the response headers to add
	rules   atomic.Pointer[domains] // the configuration in force
}

// ruleSet is a loaded configuration with, for each rule, the limit a
// DescriptorStatus reports, and the names of the limits it replaces.
type ruleSet struct {
	cfg      policy.Config
	rules    map[string]policy.Rule // by name
	limits   map[string]*rlspb.RateLimitResponse_RateLimit
	replaces map[string][]string // by rule; only rules that replace some
}

// envoyUnits are envoy's units by the names its configuration files use.
var envoyUnits = map[string]rlspb.RateLimitResponse_RateLimit_Unit{
	"second": rlspb.RateLimitResponse_RateLimit_SECOND,
	"minute": rlspb.RateLimitResponse_RateLimit_MINUTE,
	"hour":   rlspb.RateLimitResponse_RateLimit_HOUR,
	"day":    rlspb.RateLimitResponse_RateLimit_DAY,
	"week":   rlspb.RateLimitResponse_RateLimit_WEEK,
	"month":  rlspb.RateLimitResponse_RateLimit_MONTH,
	"year":   rlspb.RateLimitResponse_RateLimit_YEAR,
}

// newRuleSet indexes cfg's limits by rule: an envoy descriptor's limit as
// the file declares it, a sluice rule's as its Limit per Window in the
// largest unit that divides the window.
func newRuleSet(cfg policy.Config) *ruleSet {
	rs := &ruleSet{
		cfg:      cfg,
		rules:    make(map[string]policy.Rule, len(cfg.Rules)),
		limits:   make(map[string]*rlspb.RateLimitResponse_RateLimit, len(cfg.Rules)),
		replaces: map[string][]string{},
	}
	var walk func(ds []policy.Descriptor)
	walk = func(ds []policy.Descriptor) {
		for _, d := range ds {
			if rl := d.RateLimit; rl != nil && d.Rule != "" {
				p := &rlspb.RateLimitResponse_RateLimit{
					Name:            rl.Name,
					RequestsPerUnit: clampU32(rl.RequestsPerUnit),
					Unit:            envoyUnits[strings.ToLower(rl.Unit)],
				}
				if rl.UnitMultiplier > 1 {
					p.UnitMultiplier = wrapperspb.UInt32(clampU32(rl.UnitMultiplier))
				}
				rs.limits[d.Rule] = p
				if len(rl.Replaces) > 0 {
					rs.replaces[d.Rule] = rl.Replaces
				}
			}
			walk(d.Descriptors)
		}
	}
	walk(cfg.Descriptors)
	for _, r := range cfg.Rules {
		rs.rules[r.Name] = r
		if _, ok := rs.limits[r.Name]; !ok {
			rs.limits[r.Name] = ruleLimit(r)
		}
	}
	return rs
}

// ruleLimit is a sluice rule's limit in envoy's terms.
func ruleLimit(r policy.Rule) *rlspb.RateLimitResponse_RateLimit {
	p := &rlspb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: clampU32(r.Limit)}
	for _, u := range []struct {
		d    time.Duration
		unit rlspb.RateLimitResponse_RateLimit_Unit
	}{
		{24 * time.Hour, rlspb.RateLimitResponse_RateLimit_DAY},
		{time.Hour, rlspb.RateLimitResponse_RateLimit_HOUR},
		{time.Minute, rlspb.RateLimitResponse_RateLimit_MINUTE},
		{time.Second, rlspb.RateLimitResponse_RateLimit_SECOND},
	} {
		if r.Window >= u.d && r.Window%u.d == 0 {
			p.Unit = u.unit
			if m := r.Window / u.d; m > 1 {
				p.UnitMultiplier = wrapperspb.UInt32(clampU32(int64(m)))
			}
			break
		}
	}
	return p
}

func clampU32(v int64) uint32 {
	return uint32(min(max(v, 0), math.MaxUint32))
}

// match is one descriptor of a request, resolved.
type match struct {
	rule, key string
	ok        bool  // a limit applies
	n         int64 // the cost; 0 only looks
}

// ShouldRateLimit decides every descriptor of the request. See usage.
func (s *service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	rs := s.rules.Load().lookup(req.Domain)
	ms := make([]match, len(req.Descriptors))
	if rs.cfg.Format != policy.FormatEnvoy || req.Domain == rs.cfg.Domain {
		entries := make([]policy.Entry, 0, maxEntries)
		for i, d := range req.Descriptors {
			entries = entries[:0]
			for _, e := range d.Entries {
				entries = append(entries, policy.Entry{Key: e.Key, Value: e.Value})
			}
			m := &ms[i]
			m.rule, m.key, m.ok = rs.cfg.Match(entries...)
			m.n = int64(max(req.HitsAddend, 1)) // unset (0) is 1, as in envoy
			if h := d.GetHitsAddend(); h != nil {
				m.n = int64(min(h.Value, math.MaxInt64))
			}
			if m.ok && len(m.key) > maxKeyLength {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: its values make a key of %d bytes: at most %d", i, len(m.key), maxKeyLength)
			}
		}
	}
	rs.replace(ms)
	resp := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OK,
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(ms)),
	}
	var ds []decided // for the headers
	for i, m := range ms {
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		resp.Statuses[i] = st
		if !m.ok {
			continue
		}
		d, applies, err := s.decide(ctx, m)
		if err != nil {
			return nil, err
		}
		if !applies {
			continue
		}
		if !d.Allowed {
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
		st.CurrentLimit = rs.limits[m.rule]
		st.LimitRemaining = clampU32(d.Remaining)
		st.DurationUntilReset = durationpb.New(d.ResetAfter)
		if s.headers != (headerSet{}) {
			ds = append(ds, decided{rule: m.rule, d: d, shadow: rs.rules[m.rule].Shadow})
		}
	}
	resp.ResponseHeadersToAdd = s.headers.headers(ds, rs.rules)
	return resp, nil
}

// replace drops the limits that another matched limit of the request
// replaces (envoy's rate_limit.replaces): those descriptors are answered
// OK with no limit, and nothing is counted for them.
func (rs *ruleSet) replace(ms []match) {
	if len(rs.replaces) == 0 {
		return
	}
	var replaced map[string]bool
	for _, m := range ms {
		if !m.ok {
			continue
		}
		for _, name := range rs.replaces[m.rule] {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
	}
	if replaced == nil {
		return
	}
	for i := range ms {
		if ms[i].ok {
			if name := rs.limits[ms[i].rule].GetName(); name != "" && replaced[name] {
				ms[i].ok = false
			}
		}
	}
}

// decide makes one descriptor's decision; applies is false when the rule
// is gone (a reload under way: no limit applies, as after it).
func (s *service) decide(ctx context.Context, m match) (d sluice.Decision, applies bool, err error) {
	if m.n == 0 {
		d, err = s.l.Peek(m.rule, m.key)
	} else {
		d, err = s.l.AllowN(ctx, m.rule, m.key, m.n)
	}
	switch {
	case err == nil:
		return d, true, nil
	case errors.Is(err, sluice.ErrUnknownRule):
		return d, false, nil
	case errors.Is(err, sluice.ErrInvalidCost):
		// More than the rule could ever admit at once: over the limit,
		// as envoy ratelimit answers it.
		p, perr := s.l.Peek(m.rule, m.key)
		if perr != nil {
			return d, false, s.grpcError(perr)
		}
		p.Allowed = false
		return p, true, nil
	}
	return d, false, s.grpcError(err)
}

// grpcError is the gRPC status of a check that could not be made.
func (s *service) grpcError(err error) error {
	switch {
	case errors.Is(err, sluice.ErrClosed):
		return status.Error(codes.Unavailable, "sluice: the server is shutting down")
	case errors.Is(err, sluice.ErrKeyTooLong):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

// checkRequest refuses a request outside the bounds, before any work.
func checkRequest(req *rlspb.RateLimitRequest) error {
	bad := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, format, args...)
	}
	switch {
	case req.Domain == "":
		return bad("the domain is empty: every request names one")
	case len(req.Domain) > maxValue:
		return bad("the domain has %d bytes: at most %d", len(req.Domain), maxValue)
	case len(req.Descriptors) == 0:
		return bad("no descriptor: every request has at least one")
	case len(req.Descriptors) > maxDescriptors:
		return bad("%d descriptors: at most %d per request", len(req.Descriptors), maxDescriptors)
	}
	for i, d := range req.Descriptors {
		if err := checkDescriptor(d); err != nil {
			return bad("descriptor %d: %v", i, err)
		}
	}
	return nil
}

func checkDescriptor(d *extrl.RateLimitDescriptor) error {
	switch {
	case len(d.GetEntries()) == 0:
		return errors.New("no entry: a descriptor has at least one")
	case len(d.Entries) > maxEntries:
		return fmt.Errorf("%d entries: at most %d", len(d.Entries), maxEntries)
	case d.IsNegativeHits:
		return errors.New("is_negative_hits is not supported")
	}
	for j, e := range d.Entries {
		switch {
		case e.GetKey() == "":
			return fmt.Errorf("entry %d: the key is empty", j)
		case len(e.Key) > maxValue:
			return fmt.Errorf("entry %d: the key has %d bytes: at most %d", j, len(e.Key), maxValue)
		case len(e.Value) > maxValue:
			return fmt.Errorf("entry %d: the value has %d bytes: at most %d", j, len(e.Value), maxValue)
		}
	}
	return nil
}

// runServe serves until ctx ends, then stops the server and closes the
// limiter (pushing the last counts). ready, if not nil, gets the address
// once the server listens.
func runServe(ctx context.Context, args []string, stderr io.Writer, ready func(addr string)) int {
	return runServeEnv(ctx, args, os.LookupEnv, nil, stderr, ready)
}

// runServeEnv is runServe with the environment variables env gives, and
// the limiter's clock (nil: the system clock).
func runServeEnv(ctx context.Context, args []string, env func(string) (string, bool), clock sluice.Clock, stderr io.Writer, ready func(addr string)) int {
	c := common{clock: clock}
	fs := newFlagSet("serve", stderr)
	c.register(fs)
	rf := registerRuntime(fs, env)
	listen := fs.String("listen", DefaultListen, "the gRPC `ADDR`ess to listen on")
	httpListen := fs.String("http", "", "the `ADDR`ess of the HTTP endpoints (/json, /healthcheck, /metrics); none without it")
	headersFlag := fs.String("headers", "none", "the response `HEADERS` envoy adds: ratelimit, x-ratelimit, both comma-separated, or none")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice serve: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	hs, err := parseHeaders(*headersFlag)
	if err != nil {
		fmt.Fprintln(stderr, "sluice serve:", err)
		return exitUsage
	}
	rt, isRuntime, err := rf.dir()
	switch {
	case err != nil:
		fmt.Fprintln(stderr, "sluice serve:", err)
		return exitUsage
	case isRuntime && c.config != "":
		fmt.Fprintln(stderr, "sluice serve: -config and a runtime directory (-runtime-root, RUNTIME_ROOT) both given: one or the other")
		return exitUsage
	}
	var dir *runtimeDir
	if isRuntime {
		dir = &rt
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if err := serve(ctx, c, dir, *listen, *httpListen, hs, logger, ready); err != nil {
		logger.Error("sluice serve: " + err.Error())
		return exitError
	}
	return exitOK
}

// serve serves gRPC on listen and, if httpListen is set, the HTTP
// endpoints on it; ready gets the gRPC address, and the HTTP one after a
// space if any. The configuration is c.config, or the files of dir if it
// is not nil.
func serve(ctx context.Context, c common, dir *runtimeDir, listen, httpListen string, headers headerSet, logger *slog.Logger, ready func(string)) (err error) {
	var mp *sdkmetric.MeterProvider
	var metricsHandler http.Handler
	if httpListen != "" {
		if mp, metricsHandler, err = newMetrics(); err != nil {
			return err
		}
		defer func() { _ = mp.Shutdown(context.Background()) }()
	}
	var lmp metric.MeterProvider // nil: none
	if mp != nil {
		lmp = mp
	}
	s := &service{headers: headers}
	var l *sluice.Limiter
	var rdb redis.UniversalClient
	var applied state // dir's files in force
	var summary []any // the configuration, for the log
	if dir != nil {
		if applied, err = dir.poll(); err != nil {
			return err
		}
		doms, rules, err := dir.load(applied)
		if err != nil {
			return err
		}
		if l, rdb, err = c.limiter(rules, logger, lmp); err != nil {
			return err
		}
		s.rules.Store(doms)
		summary = []any{"runtime", dir.path(), "files", len(applied.files), "rules", len(rules)}
	} else {
		var cfg policy.Config
		if cfg, l, rdb, err = c.open(logger, lmp); err != nil {
			return err
		}
		doms, _, _ := newDomains([]policy.Config{cfg}, []string{c.config})
		s.rules.Store(doms)
		summary = []any{"config", c.config, "format", cfg.Format.String(), "domain", cfg.Domain, "rules", len(cfg.Rules)}
	}
	s.l = l
	defer func() {
		if cerr := l.Close(); cerr != nil && err == nil {
			err = cerr
		}
		if rdb != nil {
			_ = rdb.Close()
		}
	}()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if dir != nil {
		watched := make(chan struct{})
		defer func() {
			stopWatch()
			<-watched
		}()
		go func() {
			defer close(watched)
			w := &watcher{dir: *dir, applied: applied, l: l, store: s.rules.Store, logger: logger}
			w.run(watchCtx)
		}()
	} else {
		err = l.WatchFile(watchCtx, c.config, sluice.WatchOptions{
			Loaded: func(cfg policy.Config) {
				doms, _, _ := newDomains([]policy.Config{cfg}, []string{c.config})
				s.rules.Store(doms)
			},
		})
		if err != nil {
			return err
		}
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxMessage))
	rlspb.RegisterRateLimitServiceServer(srv, s)
	// gRPC health checking (grpc.health.v1): SERVING from here, NOT_SERVING
	// once the server stops, for the whole server ("") and the service.
	hs := health.NewServer()
	hs.SetServingStatus(rlspb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	served := make(chan error, 2)
	go func() { served <- srv.Serve(lis) }()
	addrs := lis.Addr().String()
	var stopping atomic.Bool
	var hsrv *http.Server
	if httpListen != "" {
		hlis, err := net.Listen("tcp", httpListen)
		if err != nil {
			srv.Stop()
			return err
		}
		hsrv = &http.Server{Handler: httpHandler(s, &stopping, metricsHandler), ReadHeaderTimeout: 10 * time.Second}
		go func() { served <- hsrv.Serve(hlis) }()
		addrs += " " + hlis.Addr().String()
		logger.Info("sluice serve: HTTP listening", "addr", hlis.Addr().String())
	}
	logger.Info("sluice serve: listening", append([]any{"addr", lis.Addr().String(), "redis", c.redisURL != ""}, summary...)...)
	if ready != nil {
		ready(addrs)
	}
	select {
	case err = <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	logger.Info("sluice serve: stopping")
	hs.Shutdown()
	stopping.Store(true)
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		if hsrv != nil {
			sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			_ = hsrv.Shutdown(sctx)
			cancel()
		}
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(shutdownGrace):
		srv.Stop()
		if hsrv != nil {
			_ = hsrv.Close()
		}
		<-stopped
	}
	return nil
}
