package httplimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/layer"
)

// Rule is one limiter rule a route checks.
type Rule struct {
	// Name is the name of a rule of the Limiter.
	Name string
	// Key names the client for this rule; nil means Config.Key.
	Key KeyFunc
}

// Route is the limit on the requests that match a pattern.
type Route struct {
	// Pattern is a net/http ServeMux pattern ("GET /api/{id}",
	// "example.com/", "/"), matched as ServeMux matches it: the most
	// specific pattern wins. A request no route matches is served without a
	// check: add a route "/" to limit everything else.
	Pattern string
	// Rules are checked together, with Limiter.AllowAll: a request is
	// admitted only if every rule admits it, and counted against all or
	// none (a denial by one rule uses up nothing of the others). Up to
	// maxRules (8). A shadow rule (policy.Rule.Shadow) never denies; the
	// headers say when it would have.
	//
	// An InFlight rule (policy.Rule.InFlight) holds a slot of its key for
	// the life of the request instead: taken with Limiter.Acquire once the
	// rate rules have admitted the request, released when the handler
	// returns (or panics). A request refused a slot is answered 503 with
	// Retry-After: 1 (Config.OnBusy), and the rate rules have counted it.
	Rules []Rule
	// Cost returns a request's cost in the rate rules' units; nil means 1.
	// A cost below 1 or above a rule's limit is an error (see ErrorMode).
	// A request takes one slot of each InFlight rule whatever its cost: a
	// Cost on a route with only InFlight rules is an error of New.
	Cost func(*http.Request) int64
}

// ErrorMode says what the middleware does when the limiter cannot make a
// check (a closed limiter, an invalid cost, an unknown rule). A store
// failure is decided by the limiter's FailureMode: [policy.FailLocal] and [policy.FailOpen]
// decide without an error; under [policy.FailClosed] the check fails with
// sluice.ErrStoreUnavailable and the request is rejected whatever the
// ErrorMode, as that failure mode asks.
type ErrorMode uint8

// The error modes; the zero ErrorMode makes New fail: the choice must be
// explicit.
const (
	// ErrorReject answers 503 Service Unavailable (Config.OnError, by
	// default a problem+json body).
	ErrorReject ErrorMode = iota + 1
	// ErrorServe serves the request unlimited, without rate-limit headers.
	// Config.ReportError still hears of the error.
	ErrorServe
)

// Denial is what the middleware knows about a request it denies.
type Denial struct {
	// Rule is the name of the rule that denied it.
	Rule string
	// Decision is that rule's decision (Allowed is false).
	Decision sluice.Decision
}

// Config configures the middleware.
type Config struct {
	// Limiter makes the checks. Required.
	Limiter *sluice.Limiter
	// Routes are the limits, by request pattern. At least one.
	Routes []Route
	// Key names the client of a request for the rules without their own;
	// nil means PeerIP(). Behind proxies use ClientIP.Key.
	Key KeyFunc
	// ErrorMode says what happens when a check cannot be made. Required:
	// there is no silent default.
	ErrorMode ErrorMode
	// OnError writes the response to a request whose check failed, when the
	// request is not served (ErrorReject, or a store failure under
	// [policy.FailClosed]); nil means a 503 problem+json. The rate-limit headers are
	// not set.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
	// ReportError, if set, hears of every failed check (to log or count
	// them), whatever the ErrorMode.
	ReportError func(r *http.Request, err error)
	// OnNoIdentity writes the response to a request whose client the key
	// function cannot name (the error wraps ErrNoIdentity or
	// ErrKeyTooLong); nil means 400 Bad Request with a problem+json body
	// that repeats nothing of err (which may quote a forwarding header or
	// name a trusted proxy): err goes to slog.Default at Debug. Such a
	// request is never checked under a shared key.
	OnNoIdentity func(w http.ResponseWriter, r *http.Request, err error)
	// Deny writes the response to a denied request; nil means 429 Too Many
	// Requests with a problem+json body (see Problem). The rate-limit
	// headers and Retry-After are already set on w. A blocked client is
	// answered by OnBlocked instead.
	Deny func(w http.ResponseWriter, r *http.Request, d Denial)
	// OnBusy writes the response to a request refused a slot of an InFlight
	// rule (Denial.Decision is Acquire's); nil means 503 Service
	// Unavailable with a problem+json body. Retry-After: 1
	// (BusyRetryAfter) is already set on w, and the rate rules' headers
	// if the route has any; the InFlight rule has no rate-limit header.
	OnBusy func(w http.ResponseWriter, r *http.Request, d Denial)
	// OnBlocked writes the response to a request denied outright, by a Deny
	// rule or a Deny override tier (sluice.Decision.Blocked): no wait lifts
	// such a denial, so no Retry-After is set. nil means 403 Forbidden
	// with a problem+json body of type BlockedProblemType.
	OnBlocked func(w http.ResponseWriter, r *http.Request, d Denial)
	// BlockedProblemType is the type URI of the default OnBlocked's problem
	// body; empty means DefaultBlockedProblemType.
	BlockedProblemType string
	// OmitHeaders lists the headers not to send; by default all are sent.
	OmitHeaders Headers
	// ProblemType is the type URI of the default denial's problem body;
	// empty means "about:blank".
	ProblemType string
}

// DefaultBlockedProblemType is the problem type of the default answer to a
// blocked client (Config.OnBlocked): the section of the front-door manual
// that says why such a client is refused and that waiting does not help.
const DefaultBlockedProblemType = "https://github.com/sluicehq/sluice/blob/main/docs/front-door.md#blocked-clients"

// BusyRetryAfter is the Retry-After, in seconds, of the default answer to
// a request refused an in-flight slot (Config.OnBusy). A slot frees when a
// holder releases it, which cannot be foreseen: the smallest whole delay.
const BusyRetryAfter = 1

var busyRetryAfter = strconv.Itoa(BusyRetryAfter)

// maxRules is the most rules a route may layer.
const maxRules = layer.MaxRules

// route is a checked Route.
type route struct {
	pattern string
	rules   *layer.RuleSet // the rate rules; nil if there are none
	keys    []KeyFunc      // the rate rules' keys, then the InFlight rules'
	slots   []string       // the InFlight rules, acquired in this order
	cost    func(*http.Request) int64
}

// middleware is a checked Config.
type middleware struct {
	lim         *sluice.Limiter
	mux         *http.ServeMux
	byPattern   map[string]*route // the routes, by their pattern as written
	all         *route            // the only route, when its pattern is "/"
	maxKey      int
	set         Headers
	errorMode   ErrorMode
	onError     func(http.ResponseWriter, *http.Request, error)
	report      func(*http.Request, error)
	onNoID      func(http.ResponseWriter, *http.Request, error)
	deny        func(http.ResponseWriter, *http.Request, Denial)
	blocked     func(http.ResponseWriter, *http.Request, Denial)
	busy        func(http.ResponseWriter, *http.Request, Denial)
	problemType string
	blockedType string
}

// routeHandler marks a route in the middleware's ServeMux, which only
// matches and never serves.
type routeHandler struct{ rt *route }

func (routeHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// New checks cfg and returns the middleware: each request that matches a
// route is checked against the route's rules, under its client's key, and
// served if admitted, with the rate-limit headers; else answered as
// cfg.Deny says. The error says what is wrong with cfg and how to fix it.
//
// While the middleware is reachable, the limiter refuses a SetRules (or a
// WatchFile reload) that leaves out a rule a route checks: see
// sluice.Limiter.Require. Once the middleware is garbage, the hold is
// released at a later garbage collection.
func New(cfg Config) (func(http.Handler) http.Handler, error) {
	m, err := newMiddleware(cfg)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(next, w, r)
		})
	}, nil
}

func newMiddleware(cfg Config) (m *middleware, err error) {
	if cfg.Limiter == nil {
		return nil, errors.New("httplimit: Config.Limiter is nil: pass the *sluice.Limiter that holds the rules")
	}
	if len(cfg.Routes) == 0 {
		return nil, errors.New(`httplimit: Config.Routes is empty: add a Route, for example {Pattern: "/", Rules: []httplimit.Rule{{Name: "api"}}}`)
	}
	switch cfg.ErrorMode {
	case ErrorReject, ErrorServe:
	default:
		return nil, fmt.Errorf("httplimit: Config.ErrorMode %d: choose httplimit.ErrorReject (answer 503) or httplimit.ErrorServe (serve unlimited) for checks the limiter cannot make", cfg.ErrorMode)
	}
	m = &middleware{
		lim:         cfg.Limiter,
		mux:         http.NewServeMux(),
		byPattern:   make(map[string]*route, len(cfg.Routes)),
		maxKey:      cfg.Limiter.MaxKeyLength(),
		set:         ^cfg.OmitHeaders,
		errorMode:   cfg.ErrorMode,
		onError:     cfg.OnError,
		report:      cfg.ReportError,
		onNoID:      cfg.OnNoIdentity,
		deny:        cfg.Deny,
		blocked:     cfg.OnBlocked,
		busy:        cfg.OnBusy,
		problemType: cfg.ProblemType,
		blockedType: cfg.BlockedProblemType,
	}
	if m.problemType == "" {
		m.problemType = "about:blank"
	}
	if m.blockedType == "" {
		m.blockedType = DefaultBlockedProblemType
	}
	if m.blocked == nil {
		m.blocked = m.defaultBlocked
	}
	if m.busy == nil {
		m.busy = m.defaultBusy
	}
	if m.onError == nil {
		m.onError = m.defaultOnError
	}
	if m.onNoID == nil {
		m.onNoID = m.defaultOnNoIdentity
	}
	if m.deny == nil {
		m.deny = m.defaultDeny
	}
	key := cfg.Key
	if key == nil {
		key = PeerIP()
	}
	var releases []func()
	defer func() {
		if err != nil {
			for _, release := range releases {
				release()
			}
		}
	}()
	for i, cr := range cfg.Routes {
		rt, err := m.route(cr, key)
		if err != nil {
			return nil, fmt.Errorf("httplimit: Config.Routes[%d] (%q): %w", i, cr.Pattern, err)
		}
		if err := register(m.mux, cr.Pattern, routeHandler{rt}); err != nil {
			return nil, fmt.Errorf("httplimit: Config.Routes[%d]: %w", i, err)
		}
		m.byPattern[cr.Pattern] = rt
		// While the middleware lives, a reload cannot leave out a rule
		// its routes check (sluice.Limiter.Require).
		release, err := cfg.Limiter.Require(fmt.Sprintf("httplimit route %q", cr.Pattern), rt.names()...)
		if err != nil {
			return nil, fmt.Errorf("httplimit: Config.Routes[%d] (%q): %w", i, cr.Pattern, err)
		}
		releases = append(releases, release)
	}
	runtime.AddCleanup(m, func(releases []func()) {
		for _, release := range releases {
			release()
		}
	}, releases)
	if len(cfg.Routes) == 1 && cfg.Routes[0].Pattern == "/" {
		m.all = m.byPattern["/"]
	}
	return m, nil
}

// register adds a pattern to the mux, turning its panic on a bad or
// conflicting pattern into an error.
func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pattern %q: %v", pattern, p)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

func (m *middleware) route(cr Route, key KeyFunc) (*route, error) {
	if len(cr.Rules) == 0 {
		return nil, errors.New("no Rules: name at least one rule of the limiter")
	}
	if len(cr.Rules) > maxRules {
		return nil, fmt.Errorf("%d Rules: a route layers at most %d", len(cr.Rules), maxRules)
	}
	rt := &route{pattern: cr.Pattern, cost: cr.Cost}
	rules := make([]layer.Rule[KeyFunc], len(cr.Rules))
	for i, r := range cr.Rules {
		rules[i] = layer.Rule[KeyFunc]{Name: r.Name, Key: r.Key, Own: r.Key != nil}
		if r.Key == nil {
			rules[i].Key = key
		}
	}
	split, err := layer.Split(m.lim, rules, cr.Cost != nil, "request")
	if err != nil {
		return nil, err
	}
	rt.slots, rt.keys = split.Slots, split.Keys
	if len(split.Rates) > 0 {
		if rt.rules, err = layer.NewRuleSet(m.lim, split.Rates...); err != nil {
			return nil, err
		}
	}
	return rt, nil
}

// names returns the names of the route's rules, rate and InFlight.
func (rt *route) names() []string {
	var names []string
	if rt.rules != nil {
		names = rt.rules.Names()
	}
	return append(names, rt.slots...)
}

// match returns the route of r, or nil. A request that a ServeMux has
// already routed (the middleware wraps a handler registered on it) carries
// the pattern it matched: a route with that very pattern is its route. The
// ServeMux's own matching allocates, so it is the last resort.
func (m *middleware) match(r *http.Request) *route {
	if m.all != nil {
		return m.all
	}
	if r.Pattern != "" {
		if rt := m.byPattern[r.Pattern]; rt != nil {
			return rt
		}
	}
	h, _ := m.mux.Handler(r)
	if rh, ok := h.(routeHandler); ok {
		return rh.rt
	}
	return nil // no route, or the mux would redirect (to a cleaned path)
}

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	rt := m.match(r)
	if rt == nil {
		next.ServeHTTP(w, r)
		return
	}
	var keyBuf [maxRules]string
	keys := keyBuf[:len(rt.keys)]
	for i, fn := range rt.keys {
		key, err := m.key(fn, r)
		if err != nil {
			m.onNoID(w, r, err)
			return
		}
		keys[i] = key
	}
	if rt.rules != nil {
		nr := rt.rules.Len()
		n := int64(1)
		if rt.cost != nil {
			n = rt.cost(r)
		}
		res, err := rt.rules.Check(r.Context(), keys[:nr], n, layer.FieldSet(m.set))
		if err != nil {
			if m.failed(w, r, err) {
				next.ServeHTTP(w, r)
			}
			return
		}
		setHeaders(w.Header(), &res.Values)
		if d := res.Decision; !d.Allowed {
			dn := Denial{Rule: rt.rules.Name(max(res.Denied, 0)), Decision: d}
			if d.Blocked() {
				m.blocked(w, r, dn)
				return
			}
			m.deny(w, r, dn)
			return
		}
		keys = keys[nr:]
	}
	if len(rt.slots) != 0 {
		m.serveHeld(rt, keys, next, w, r)
		return
	}
	next.ServeHTTP(w, r)
}

// failed hears of a check that could not be made and answers it as the
// ErrorMode says, unless the request is to be served unlimited (true).
func (m *middleware) failed(w http.ResponseWriter, r *http.Request, err error) (serve bool) {
	if m.report != nil {
		m.report(r, err)
	}
	if m.errorMode == ErrorServe && !errors.Is(err, sluice.ErrStoreUnavailable) {
		return true
	}
	m.onError(w, r, err)
	return false
}

// serveHeld takes a slot of each InFlight rule of rt under keys (one per
// rule) and serves r holding them: they are released when next returns,
// panics included (the deferred release runs, and the panic goes on). A
// hijacked connection's slots are released when next returns too, so its
// life after that is not counted. A request refused a slot gives back the
// slots it took and is answered by OnBusy; an Acquire error follows the
// ErrorMode (ErrorServe serves it without that slot).
func (m *middleware) serveHeld(rt *route, keys []string, next http.Handler, w http.ResponseWriter, r *http.Request) {
	var buf [maxRules]sluice.Slot
	held := buf[:0]
	defer func() {
		for _, s := range held {
			s.Release()
		}
	}()
	for i, name := range rt.slots {
		s, d, err := m.lim.Acquire(r.Context(), name, keys[i])
		if err != nil {
			if m.failed(w, r, err) {
				continue
			}
			return
		}
		if !d.Allowed {
			w.Header().Set(hRetryAfter, busyRetryAfter)
			m.busy(w, r, Denial{Rule: name, Decision: d})
			return
		}
		held = append(held, s)
	}
	next.ServeHTTP(w, r)
}

// key runs a key function and bounds its key: an error, an empty key or
// one past the limiter's MaxKeyLength is no identity.
func (m *middleware) key(fn KeyFunc, r *http.Request) (string, error) {
	key, err := fn(r)
	switch {
	case err != nil:
		return "", err
	case key == "":
		return "", fmt.Errorf("%w: the key function returned an empty key", ErrNoIdentity)
	case len(key) > m.maxKey:
		return "", fmt.Errorf("%w: %d bytes, the limiter's MaxKeyLength is %d (wrap the KeyFunc with httplimit.Hashed)", ErrKeyTooLong, len(key), m.maxKey)
	}
	return key, nil
}

func (m *middleware) defaultDeny(w http.ResponseWriter, r *http.Request, d Denial) {
	retry := layer.Seconds(d.Decision.RetryAfter, 1)
	Problem{
		Type:       m.problemType,
		Title:      http.StatusText(http.StatusTooManyRequests),
		Status:     http.StatusTooManyRequests,
		Detail:     "rate limit " + strconv.Quote(d.Rule) + " exceeded: retry in " + strconv.FormatInt(retry, 10) + "s",
		RetryAfter: retry,
	}.Write(w)
}

func (m *middleware) defaultBusy(w http.ResponseWriter, r *http.Request, d Denial) {
	Problem{
		Type:       "about:blank",
		Title:      http.StatusText(http.StatusServiceUnavailable),
		Status:     http.StatusServiceUnavailable,
		Detail:     "in-flight limit " + strconv.Quote(d.Rule) + " reached: every slot is taken; retry in " + strconv.Itoa(BusyRetryAfter) + "s",
		RetryAfter: BusyRetryAfter,
	}.Write(w)
}

func (m *middleware) defaultBlocked(w http.ResponseWriter, r *http.Request, d Denial) {
	Problem{
		Type:   m.blockedType,
		Title:  "Blocked by rate limit policy",
		Status: http.StatusForbidden,
		Detail: "rate limit " + strconv.Quote(d.Rule) + " admits no request from this client: waiting does not help",
	}.Write(w)
}

func (m *middleware) defaultOnError(w http.ResponseWriter, r *http.Request, err error) {
	Problem{
		Type:   "about:blank",
		Title:  http.StatusText(http.StatusServiceUnavailable),
		Status: http.StatusServiceUnavailable,
		Detail: "the rate limiter could not decide this request",
	}.Write(w)
}

// defaultOnNoIdentity answers 400. The body never repeats err: it may
// quote a forwarding header or name a trusted proxy's address, which are
// not the client's to see. The detail goes to slog.Default at Debug (a
// client without identity is routine, and would otherwise log a line per
// request).
func (m *middleware) defaultOnNoIdentity(w http.ResponseWriter, r *http.Request, err error) {
	detail := "the request does not identify its client"
	if errors.Is(err, ErrKeyTooLong) {
		detail = "the client's key is longer than the rate limiter accepts"
	}
	slog.Default().LogAttrs(r.Context(), slog.LevelDebug, "httplimit: request without client identity",
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	Problem{
		Type:   "about:blank",
		Title:  http.StatusText(http.StatusBadRequest),
		Status: http.StatusBadRequest,
		Detail: detail,
	}.Write(w)
}
