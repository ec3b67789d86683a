// Package grpclimit rate-limits gRPC servers with a sluice.Limiter: unary
// and stream server interceptors.
//
// Each call is checked against its method's rule under its client's key (the
// peer address, IPv6 grouped by /64, or a metadata value). An admitted call
// proceeds with the rate-limit fields in its response header metadata
// (ratelimit-policy and ratelimit, the IETF fields, and x-ratelimit-limit,
// x-ratelimit-remaining, x-ratelimit-reset); a denied call ends with
// codes.ResourceExhausted and the details errdetails.RetryInfo (when to
// retry) and errdetails.QuotaFailure (which rule).
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// KeyFunc names the client of a call: the key it is limited under. It
// returns an error wrapping ErrNoIdentity, never an empty key, when it
// cannot tell; the call then fails with codes.Unauthenticated.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// ErrNoIdentity means a call does not say who its client is.
var ErrNoIdentity = errors.New("grpclimit: no client identity")

// PeerIP returns a KeyFunc that keys a call by its peer's IP address, IPv6
// addresses grouped by their /64 (one host can pick any address in it).
func PeerIP() KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: no peer", ErrNoIdentity)
		}
		var a netip.Addr
		switch pa := p.Addr.(type) {
		case *net.TCPAddr:
			a = pa.AddrPort().Addr()
		default:
			ap, err := netip.ParseAddrPort(p.Addr.String())
			if err != nil {
				return "", fmt.Errorf("%w: peer %q is not an IP address", ErrNoIdentity, p.Addr.String())
			}
			a = ap.Addr()
		}
		a = a.Unmap().WithZone("")
		if a.Is6() {
			pfx, _ := a.Prefix(httplimit.DefaultIPv6Prefix)
			return pfx.String(), nil
		}
		return a.String(), nil
	}
}

// Metadata returns a KeyFunc that keys a call by the first value of the
// request metadata key (an API key, a tenant): "m:" and the value. Use it
// only for metadata your service authenticates: any client can send any
// value.
func Metadata(key string) KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		vs := metadata.ValueFromIncomingContext(ctx, key)
		if len(vs) == 0 || vs[0] == "" {
			return "", fmt.Errorf("%w: no %q metadata", ErrNoIdentity, key)
		}
		return "m:" + vs[0], nil
	}
}

// ErrorMode says what the interceptors do when the limiter cannot make a
// check (a closed limiter, an invalid cost). A store failure under the
// limiter's FailClosed fails the call with codes.Unavailable whatever the
// ErrorMode.
type ErrorMode uint8

const (
	errorModeUnset ErrorMode = iota
	// ErrorReject fails the call with codes.Unavailable.
	ErrorReject
	// ErrorServe lets the call proceed unlimited.
	ErrorServe
)

// Config configures the interceptors.
type Config struct {
	// Limiter makes the checks. Required.
	Limiter *sluice.Limiter
	// Rule is the rule of every method not in Methods; "" leaves them
	// unlimited.
	Rule string
	// Methods maps full method names ("/pkg.Service/Method") to their rule;
	// a method mapped to "" is unlimited.
	Methods map[string]string
	// Key names the client of a call; nil means PeerIP().
	Key KeyFunc
	// Cost returns a call's cost; nil means 1.
	Cost func(ctx context.Context, fullMethod string) int64
	// ErrorMode says what happens when a check cannot be made. Required.
	ErrorMode ErrorMode
	// ReportError, if set, hears of every failed check.
	ReportError func(ctx context.Context, fullMethod string, err error)
	// OmitMetadata leaves the rate-limit fields out of the response headers.
	OmitMetadata bool
}

// limiter is a checked Config.
type limiter struct {
	cfg    Config
	maxKey int
	policy map[string]string // rule name -> RateLimit-Policy value
	limits map[string]string // rule name -> limit as text
}

func newLimiter(cfg Config) (*limiter, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("grpclimit: Config.Limiter is nil: pass the *sluice.Limiter that holds the rules")
	}
	switch cfg.ErrorMode {
	case ErrorReject, ErrorServe:
	default:
		return nil, fmt.Errorf("grpclimit: Config.ErrorMode %d: choose grpclimit.ErrorReject (fail with Unavailable) or grpclimit.ErrorServe (proceed unlimited) for checks the limiter cannot make", cfg.ErrorMode)
	}
	if cfg.Key == nil {
		cfg.Key = PeerIP()
	}
	l := &limiter{cfg: cfg, maxKey: cfg.Limiter.MaxKeyLength(), policy: map[string]string{}, limits: map[string]string{}}
	names := []string{cfg.Rule}
	for _, r := range cfg.Methods {
		names = append(names, r)
	}
	for _, name := range names {
		if name == "" {
			continue
		}
		pr, ok := cfg.Limiter.Rule(name)
		if !ok {
			return nil, fmt.Errorf("grpclimit: rule %q: the limiter has no such rule", name)
		}
		v, err := httplimit.PolicyField(pr)
		if err != nil {
			return nil, err
		}
		l.policy[name], l.limits[name] = v, strconv.FormatInt(pr.Limit, 10)
	}
	if len(l.policy) == 0 {
		return nil, errors.New("grpclimit: no rule: set Config.Rule or Config.Methods")
	}
	// While the interceptor lives, a reload cannot leave out a rule it
	// checks (sluice.Limiter.Require).
	release, err := cfg.Limiter.Require("grpclimit interceptor", slices.Sorted(maps.Keys(l.policy))...)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	runtime.AddCleanup(l, func(release func()) { release() }, release)
	return l, nil
}

// UnaryServerInterceptor checks cfg and returns the unary interceptor.
// While it is reachable, the limiter refuses a SetRules (or a WatchFile
// reload) that leaves out a rule it checks (sluice.Limiter.Require).
func UnaryServerInterceptor(cfg Config) (grpc.UnaryServerInterceptor, error) {
	l, err := newLimiter(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, err := l.check(ctx, info.FullMethod)
		if md != nil {
			_ = grpc.SetHeader(ctx, md) // fails only if headers were sent: they were not
		}
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}, nil
}

// StreamServerInterceptor checks cfg and returns the stream interceptor: a
// stream is checked once, when it opens. While it is reachable, the
// limiter refuses a reload that leaves out a rule it checks, as
// UnaryServerInterceptor's does.
func StreamServerInterceptor(cfg Config) (grpc.StreamServerInterceptor, error) {
	l, err := newLimiter(cfg)
	if err != nil {
		return nil, err
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, err := l.check(ss.Context(), info.FullMethod)
		if md != nil {
			_ = ss.SetHeader(md)
		}
		if err != nil {
			return err
		}
		return handler(srv, ss)
	}, nil
}

// check decides a call: the header metadata to send (nil for none) and the
// call's error (nil to proceed).
func (l *limiter) check(ctx context.Context, method string) (metadata.MD, error) {
	rule, ok := l.cfg.Methods[method]
	if !ok {
		rule = l.cfg.Rule
	}
	if rule == "" {
		return nil, nil
	}
	key, err := l.cfg.Key(ctx, method)
	switch {
	case err != nil:
		return nil, status.Error(codes.Unauthenticated, err.Error())
	case key == "":
		return nil, status.Error(codes.Unauthenticated, "grpclimit: the key function returned an empty key")
	case len(key) > l.maxKey:
		return nil, status.Errorf(codes.InvalidArgument, "grpclimit: client key of %d bytes, the limiter's MaxKeyLength is %d", len(key), l.maxKey)
	}
	n := int64(1)
	if l.cfg.Cost != nil {
		n = l.cfg.Cost(ctx, method)
	}
	d, err := l.cfg.Limiter.AllowN(ctx, rule, key, n)
	if err != nil {
		if l.cfg.ReportError != nil {
			l.cfg.ReportError(ctx, method, err)
		}
		if l.cfg.ErrorMode == ErrorServe && !errors.Is(err, sluice.ErrStoreUnavailable) {
			return nil, nil
		}
		return nil, status.Error(codes.Unavailable, "rate limiter unavailable")
	}
	var md metadata.MD
	if !l.cfg.OmitMetadata {
		rl, err := httplimit.RateLimitField(rule, d)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		md = metadata.Pairs(
			"ratelimit-policy", l.policy[rule],
			"ratelimit", rl,
			"x-ratelimit-limit", l.limits[rule],
			"x-ratelimit-remaining", strconv.FormatInt(max(d.Remaining, 0), 10),
			"x-ratelimit-reset", strconv.FormatInt(time.Now().Add(d.ResetAfter+time.Second-1).Unix(), 10),
		)
	}
	if d.Allowed {
		return md, nil
	}
	retry := max(time.Duration(math.Ceil(d.RetryAfter.Seconds()))*time.Second, time.Second)
	st, err := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit %q exceeded: retry in %v", rule, retry)).WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     "rule:" + rule,
			Description: fmt.Sprintf("more than %s per %v", l.limits[rule], ruleWindow(l.cfg.Limiter, rule)),
		}}},
	)
	if err != nil {
		return md, status.Error(codes.ResourceExhausted, "rate limit exceeded")
	}
	if md != nil {
		md.Set("retry-after", strconv.FormatInt(int64(retry/time.Second), 10))
	}
	return md, st.Err()
}

func ruleWindow(l *sluice.Limiter, name string) time.Duration {
	pr, _ := l.Rule(name)
	return pr.Window
}
