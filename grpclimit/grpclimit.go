// Package grpclimit rate-limits gRPC servers with a sluice.Limiter: unary
// and stream server interceptors, with the same semantics as httplimit.
//
// A call is matched to a Route by its full method name: a method's own
// pattern ("/pkg.Service/Method") wins over its service's
// ("/pkg.Service/*"), which wins over the catch-all ("*"). The route's
// rules are checked together under each rule's client key (a KeyFunc: the
// peer address, a forwarded client address, metadata, an authenticated
// user, or any function of the call's context), with Limiter.AllowAll when
// there are several: the call is admitted only if every rule admits it,
// and a denial by one rule consumes nothing from the others.
//
// An admitted call proceeds with the rate-limit fields in its response
// header metadata, the same fields as httplimit's headers, built by the
// same code as httplimit's middleware from what is in force for the call's keys:
// their override tiers' limits, and the rules as the last SetRules or
// WatchFile reload left them. They are ratelimit-policy and ratelimit, the
// IETF fields, one item per rule that limits the key, and
// x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset for the
// enforcing rule that binds (never a shadow rule). A call of an Unlimited
// tier gets no rate-limit metadata. A denied call ends with
// codes.ResourceExhausted, the same metadata and retry-after, and the
// details errdetails.RetryInfo (when to retry) and errdetails.QuotaFailure
// (which rule); a blocked one (a Deny rule or tier: no wait lifts it) with
// codes.PermissionDenied and errdetails.ErrorInfo (reason
// RATE_LIMIT_BLOCKED), without retry-after or RetryInfo. A call whose
// client cannot be named ends with
// codes.Unauthenticated; the status message never repeats the key
// function's error (it may quote metadata or name a proxy), which is
// logged at Debug on slog.Default.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/layer"
)

// ErrorMode says what the interceptors do when the limiter cannot make a
// check (a closed limiter, an invalid cost). A store failure under the
// limiter's policy.FailClosed fails the call with codes.Unavailable whatever the
// ErrorMode.
type ErrorMode uint8

// The error modes; the zero ErrorMode makes the interceptors' constructors
// fail: the choice must be explicit.
const (
	// ErrorReject fails the call with codes.Unavailable.
	ErrorReject ErrorMode = iota + 1
	// ErrorServe lets the call proceed unlimited.
	ErrorServe
)

// Rule is one limiter rule a route checks.
type Rule struct {
	// Name is the name of a rule of the Limiter.
	Name string
	// Key names the client for this rule; nil means Config.Key.
	Key KeyFunc
}

// Route is the limit on the calls whose full method name matches a
// pattern.
type Route struct {
	// Pattern is "/pkg.Service/Method" (one method), "/pkg.Service/*"
	// (every method of a service) or "*" (every method). A call's route is
	// the most specific pattern that matches it: its method's, else its
	// service's, else "*". A call no route matches is not limited. Each
	// pattern appears once in a Config (Rule and Methods included).
	Pattern string
	// Rules are checked together: a call is admitted only if every rule
	// admits it, and counted against all or none (Limiter.AllowAll: a
	// denial by one rule uses up nothing of the others). Up to 8. A shadow
	// rule (policy.Rule.Shadow) never denies. Empty only with Unlimited.
	//
	// An InFlight rule (policy.Rule.InFlight) holds a slot of its key for
	// the life of the call (of the stream, for a stream) instead: taken
	// with Limiter.Acquire once the rate rules have admitted the call,
	// released when the handler returns (or panics). A call refused a slot
	// fails with codes.ResourceExhausted, with retry-after 1
	// (BusyRetryAfter); the rate rules have counted it.
	Rules []Rule
	// Unlimited exempts the matching calls (a health check under a "*"
	// route); Rules must then be empty.
	Unlimited bool
	// Cost returns a call's cost in the rate rules' units; nil means
	// Config.Cost, and 1 without it. A call takes one slot of each InFlight
	// rule whatever its cost: a Cost on a route with only InFlight rules is
	// an error of the constructors.
	Cost func(ctx context.Context, fullMethod string) int64
}

// Config configures the interceptors.
type Config struct {
	// Limiter makes the checks. Required.
	Limiter *sluice.Limiter
	// Routes are the limits, by method pattern (see Route.Pattern).
	Routes []Route
	// Rule is a one-rule route for "*": the rule of every method no other
	// pattern matches; "" adds no route.
	Rule string
	// Methods maps method patterns ("/pkg.Service/Method", or the
	// wildcards of Route.Pattern) to a one-rule route each; a pattern
	// mapped to "" is Unlimited.
	Methods map[string]string
	// Key names the client of a call for the rules without their own key;
	// nil means PeerIP().
	Key KeyFunc
	// Cost returns a call's cost for the routes without their own Cost;
	// nil means 1.
	Cost func(ctx context.Context, fullMethod string) int64
	// ErrorMode says what happens when a check cannot be made. Required.
	ErrorMode ErrorMode
	// ReportError, if set, hears of every failed check.
	ReportError func(ctx context.Context, fullMethod string, err error)
	// OmitMetadata leaves the rate-limit fields out of the response headers.
	OmitMetadata bool
}

// maxRules is the most rules a route may layer: layer.MaxRules, as for
// httplimit.
const maxRules = layer.MaxRules

// route is a checked Route; one without rules is unlimited.
type route struct {
	pattern string
	rules   *layer.RuleSet // the rate rules; nil if none
	keys    []KeyFunc      // the rate rules' keys, then the InFlight rules'
	slots   []string       // the InFlight rules, acquired in this order
	cost    func(ctx context.Context, fullMethod string) int64
}

// unlimited reports whether rt checks nothing.
func (rt *route) unlimited() bool { return rt.rules == nil && len(rt.slots) == 0 }

// names returns the names of the route's rules, rate and InFlight.
func (rt *route) names() []string {
	var out []string
	if rt.rules != nil {
		out = rt.rules.Names()
	}
	return append(out, rt.slots...)
}

// BusyRetryAfter is the retry-after, in seconds, of a call refused an
// in-flight slot: a slot frees when a holder releases it, which cannot be
// foreseen, so the smallest whole delay: httplimit's.
const BusyRetryAfter = httplimit.BusyRetryAfter

// busyRetryAfter is BusyRetryAfter as the retry-after metadata's value.
var busyRetryAfter = strconv.Itoa(BusyRetryAfter)

// held is the slots a call holds, released when it ends.
type held struct {
	s [maxRules]sluice.Slot
	n int
}

// release gives back the slots.
func (h *held) release() {
	for _, s := range h.s[:h.n] {
		s.Release()
	}
}

// limiter is a checked Config.
type limiter struct {
	lim       *sluice.Limiter
	router    router
	maxKey    int
	errorMode ErrorMode
	report    func(ctx context.Context, fullMethod string, err error)
	set       layer.FieldSet // the fields sent: all, or none
}

func newLimiter(cfg Config) (l *limiter, err error) {
	if cfg.Limiter == nil {
		return nil, errors.New("grpclimit: Config.Limiter is nil: pass the *sluice.Limiter that holds the rules")
	}
	switch cfg.ErrorMode {
	case ErrorReject, ErrorServe:
	default:
		return nil, fmt.Errorf("grpclimit: Config.ErrorMode %d: choose grpclimit.ErrorReject (fail with Unavailable) or grpclimit.ErrorServe (proceed unlimited) for checks the limiter cannot make", cfg.ErrorMode)
	}
	key := cfg.Key
	if key == nil {
		key = PeerIP()
	}
	routes := append([]Route(nil), cfg.Routes...)
	if cfg.Rule != "" {
		routes = append(routes, Route{Pattern: "*", Rules: []Rule{{Name: cfg.Rule}}})
	}
	for p, name := range cfg.Methods {
		if name == "" {
			routes = append(routes, Route{Pattern: p, Unlimited: true})
		} else {
			routes = append(routes, Route{Pattern: p, Rules: []Rule{{Name: name}}})
		}
	}
	if len(routes) == 0 {
		return nil, errors.New("grpclimit: no rule: set Config.Routes (or Config.Rule or Config.Methods)")
	}
	l = &limiter{
		lim:       cfg.Limiter,
		router:    router{method: map[string]*route{}, service: map[string]*route{}},
		maxKey:    cfg.Limiter.MaxKeyLength(),
		errorMode: cfg.ErrorMode,
		report:    cfg.ReportError,
	}
	if !cfg.OmitMetadata {
		l.set = layer.AllFields
	}
	var releases []func()
	defer func() {
		if err != nil {
			for _, release := range releases {
				release()
			}
		}
	}()
	limited := 0
	for _, cr := range routes {
		if _, _, err := parsePattern(cr.Pattern); err != nil {
			return nil, fmt.Errorf("grpclimit: %w", err)
		}
		rt, err := l.route(cr, key, cfg.Cost)
		if err != nil {
			return nil, fmt.Errorf("grpclimit: route %q: %w", cr.Pattern, err)
		}
		if err := l.router.add(cr.Pattern, rt); err != nil {
			return nil, fmt.Errorf("grpclimit: %w", err)
		}
		if rt.unlimited() {
			continue
		}
		limited++
		// While the interceptor lives, a reload cannot leave out a rule
		// it checks (sluice.Limiter.Require).
		release, err := cfg.Limiter.Require(fmt.Sprintf("grpclimit interceptor, route %q", cr.Pattern), rt.names()...)
		if err != nil {
			return nil, fmt.Errorf("grpclimit: route %q: %w", cr.Pattern, err)
		}
		releases = append(releases, release)
	}
	if limited == 0 {
		return nil, errors.New("grpclimit: no rule: every route is Unlimited")
	}
	runtime.AddCleanup(l, func(releases []func()) {
		for _, release := range releases {
			release()
		}
	}, releases)
	return l, nil
}

// route checks cr.
func (l *limiter) route(cr Route, key KeyFunc, cost func(context.Context, string) int64) (*route, error) {
	rt := &route{pattern: cr.Pattern, cost: cr.Cost}
	if rt.cost == nil {
		rt.cost = cost
	}
	switch {
	case cr.Unlimited && len(cr.Rules) > 0:
		return nil, errors.New("a route with both Unlimited and Rules: choose one")
	case cr.Unlimited:
		return rt, nil
	case len(cr.Rules) == 0:
		return nil, errors.New("no Rules: name at least one rule of the limiter, or set Unlimited to exempt these calls")
	case len(cr.Rules) > maxRules:
		return nil, fmt.Errorf("%d Rules: a route layers at most %d", len(cr.Rules), maxRules)
	}
	rules := make([]layer.Rule[KeyFunc], len(cr.Rules))
	for i, r := range cr.Rules {
		rules[i] = layer.Rule[KeyFunc]{Name: r.Name, Key: r.Key, Own: r.Key != nil}
		if r.Key == nil {
			rules[i].Key = key
		}
	}
	split, err := layer.Split(l.lim, rules, cr.Cost != nil, "call")
	if err != nil {
		return nil, err
	}
	rt.slots, rt.keys = split.Slots, split.Keys
	if len(split.Rates) > 0 {
		if rt.rules, err = layer.NewRuleSet(l.lim, split.Rates...); err != nil {
			return nil, err
		}
	}
	return rt, nil
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
		var h held
		md, err := l.check(ctx, info.FullMethod, &h)
		if md != nil {
			_ = grpc.SetHeader(ctx, md) // fails only if headers were sent: they were not
		}
		if err != nil {
			return nil, err
		}
		if h.n == 0 {
			return handler(ctx, req)
		}
		defer h.release() // panics included
		return handler(ctx, req)
	}, nil
}

// StreamServerInterceptor checks cfg and returns the stream interceptor: a
// stream is checked once, when it opens, and holds its in-flight slots
// until its handler returns. While it is reachable, the
// limiter refuses a reload that leaves out a rule it checks, as
// UnaryServerInterceptor's does.
func StreamServerInterceptor(cfg Config) (grpc.StreamServerInterceptor, error) {
	l, err := newLimiter(cfg)
	if err != nil {
		return nil, err
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		var h held
		md, err := l.check(ss.Context(), info.FullMethod, &h)
		if md != nil {
			_ = ss.SetHeader(md)
		}
		if err != nil {
			return err
		}
		if h.n == 0 {
			return handler(srv, ss)
		}
		defer h.release() // panics included
		return handler(srv, ss)
	}, nil
}

// check decides a call: the header metadata to send (nil for none) and the
// call's error (nil to proceed). The in-flight slots taken for a call that
// proceeds are in h, for the caller to release when the call ends.
func (l *limiter) check(ctx context.Context, method string, h *held) (metadata.MD, error) {
	rt := l.router.match(method)
	if rt == nil || rt.unlimited() {
		return nil, nil
	}
	var keyBuf [maxRules]string
	keys := keyBuf[:len(rt.keys)]
	for i, fn := range rt.keys {
		key, err := l.key(ctx, fn, method)
		if err != nil {
			return nil, err
		}
		keys[i] = key
	}
	if rt.rules == nil {
		return l.acquire(ctx, method, rt, keys, nil, h)
	}
	nr := rt.rules.Len()
	n := int64(1)
	if rt.cost != nil {
		n = rt.cost(ctx, method)
	}
	res, err := rt.rules.Check(ctx, keys[:nr], n, l.set)
	if err != nil {
		return nil, l.failed(ctx, method, err)
	}
	md := toMetadata(&res.Values)
	d := res.Decision
	if d.Allowed {
		if len(rt.slots) != 0 {
			return l.acquire(ctx, method, rt, keys[nr:], md, h)
		}
		return md, nil
	}
	rule := rt.rules.Name(max(res.Denied, 0))
	if d.Blocked() {
		st, err := status.New(codes.PermissionDenied, fmt.Sprintf("rate limit %q admits no call from this client: waiting does not help", rule)).WithDetails(
			&errdetails.ErrorInfo{Reason: BlockedReason, Domain: ErrorDomain, Metadata: map[string]string{"rule": rule}},
		)
		if err != nil {
			return md, status.Error(codes.PermissionDenied, "blocked by rate limit policy")
		}
		return md, st.Err()
	}
	retry := max(time.Duration(math.Ceil(d.RetryAfter.Seconds()))*time.Second, time.Second)
	window, _ := l.lim.Window(rule)
	st, err := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit %q exceeded: retry in %v", rule, retry)).WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     "rule:" + rule,
			Description: fmt.Sprintf("more than %d per %v", d.Limit, window),
		}}},
	)
	if err != nil {
		return md, status.Error(codes.ResourceExhausted, "rate limit exceeded")
	}
	return md, st.Err()
}

// failed hears of a check that could not be made and returns the call's
// error as the ErrorMode says (nil: proceed unlimited).
func (l *limiter) failed(ctx context.Context, method string, err error) error {
	if l.report != nil {
		l.report(ctx, method, err)
	}
	if l.errorMode == ErrorServe && !errors.Is(err, sluice.ErrStoreUnavailable) {
		return nil
	}
	return status.Error(codes.Unavailable, "rate limiter unavailable")
}

// acquire takes a slot of each InFlight rule of rt under keys (one per
// rule) into h. A call refused a slot gives back those it took and fails
// with ResourceExhausted; md (the rate rules' fields) gets retry-after. An
// Acquire error follows the ErrorMode (ErrorServe proceeds without that
// slot).
func (l *limiter) acquire(ctx context.Context, method string, rt *route, keys []string, md metadata.MD, h *held) (metadata.MD, error) {
	for i, name := range rt.slots {
		s, d, err := l.lim.Acquire(ctx, name, keys[i])
		if err != nil {
			if err := l.failed(ctx, method, err); err != nil {
				h.release()
				h.n = 0
				return md, err
			}
			continue
		}
		if !d.Allowed {
			h.release()
			h.n = 0
			if l.set != 0 {
				if md == nil {
					md = metadata.MD{}
				}
				md.Set("retry-after", busyRetryAfter)
			}
			return md, busy(name, d)
		}
		h.s[h.n] = s
		h.n++
	}
	return md, nil
}

// busy is the error of a call refused a slot of the InFlight rule named
// rule.
func busy(rule string, d sluice.Decision) error {
	msg := fmt.Sprintf("in-flight limit %q reached: every slot is taken; retry in %ds", rule, BusyRetryAfter)
	st, err := status.New(codes.ResourceExhausted, msg).WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(BusyRetryAfter * time.Second)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     "rule:" + rule,
			Description: fmt.Sprintf("more than %d in flight", d.Limit),
		}}},
	)
	if err != nil {
		return status.Error(codes.ResourceExhausted, msg)
	}
	return st.Err()
}

// The errdetails.ErrorInfo of a blocked call (codes.PermissionDenied).
const (
	// BlockedReason is the ErrorInfo's Reason: a Deny rule or tier admits
	// no call from the client, and waiting does not help. Its Metadata
	// "rule" names the rule.
	BlockedReason = "RATE_LIMIT_BLOCKED"
	// ErrorDomain is the ErrorInfo's Domain.
	ErrorDomain = "sluice"
)

// toMetadata returns the fields v as header metadata, under their names in
// lower case (layer.MetadataNames), all in one []string; nil when v has
// none.
func toMetadata(v *layer.Values) metadata.MD {
	n := v.Count()
	if n == 0 {
		return nil
	}
	md := make(metadata.MD, n)
	all := make([]string, 0, n)
	for i := range layer.NumFields {
		if f := v.Field(i); f != "" {
			all = append(all, f)
			md[layer.MetadataNames[i]] = all[len(all)-1 : len(all) : len(all)]
		}
	}
	return md
}

// key runs a key function and bounds its key. A call without a key is
// answered with a status that repeats nothing of the error: it may quote
// metadata or name a trusted proxy, which is not the client's to see. The
// error goes to slog.Default at Debug (a client without identity is
// routine, and would otherwise log a line per call).
func (l *limiter) key(ctx context.Context, fn KeyFunc, method string) (string, error) {
	key, err := fn(ctx, method)
	switch {
	case err != nil:
	case key == "":
		err = errors.New("grpclimit: the key function returned an empty key")
	case len(key) > l.maxKey:
		slog.Default().LogAttrs(ctx, slog.LevelDebug, "grpclimit: client key too long",
			slog.String("method", method), slog.Int("bytes", len(key)), slog.Int("max", l.maxKey))
		return "", status.Error(codes.InvalidArgument, "grpclimit: the client's key is longer than the rate limiter accepts")
	default:
		return key, nil
	}
	slog.Default().LogAttrs(ctx, slog.LevelDebug, "grpclimit: call without client identity",
		slog.String("method", method), slog.String("error", err.Error()))
	return "", status.Error(codes.Unauthenticated, "grpclimit: the call does not identify its client")
}
