package grpclimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/internal/sftest"
	"github.com/sluicehq/sluice/policy"
)

// sfItems parses a metadata field as an RFC 9651 List of Items named by
// sf-strings and returns the names in order and the items by name.
func sfItems(t *testing.T, md metadata.MD, key string) ([]string, map[string]httpsfv.Item) {
	t.Helper()
	return sftest.Items(t, key, md.Get(key))
}

// violation returns the subject of a denial's QuotaFailure.
func violation(t *testing.T, st *status.Status) string {
	t.Helper()
	for _, d := range st.Details() {
		if q, ok := d.(*errdetails.QuotaFailure); ok {
			require.Len(t, q.GetViolations(), 1)
			return q.GetViolations()[0].GetSubject()
		}
	}
	t.Fatalf("no QuotaFailure in %v", st)
	return ""
}

// TestLayered: a route with a per-IP and a per-tenant rule, over a real
// connection. Each rule's item is in both fields; a denial by one rule
// consumes nothing from the other, whichever denies.
func TestLayered(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t,
		policy.Rule{Name: "ip", Limit: 3, Window: time.Minute},
		policy.Rule{Name: "tenant", Limit: 2, Window: time.Hour},
	)
	conn := serve(t, grpclimit.Config{Limiter: lim, Routes: []grpclimit.Route{{
		Pattern: "*",
		Rules:   []grpclimit.Rule{{Name: "ip"}, {Name: "tenant", Key: grpclimit.Metadata("x-tenant")}},
	}}}, nil, nil)
	for i, tc := range []struct {
		tenant     string
		code       codes.Code
		ip, tenRem int64  // each rule's remaining after the call
		binding    string // the rule of the legacy fields (and of the denial)
	}{
		{"a", codes.OK, 2, 1, "tenant"},
		{"a", codes.OK, 1, 0, "tenant"},
		{"a", codes.ResourceExhausted, 1, 0, "tenant"}, // the IP rule keeps its 1
		{"b", codes.OK, 0, 1, "ip"},
		{"c", codes.ResourceExhausted, 0, 2, "ip"}, // tenant c keeps its 2
	} {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-tenant", tc.tenant)
		st, hdr := call(t, ctx, conn, "/sluice.test.Echo/Say")
		require.Equal(t, tc.code, st.Code(), "call %d: %v", i+1, st)
		names, pol := sfItems(t, hdr, "ratelimit-policy")
		assert.Equal(t, []string{"ip", "tenant"}, names)
		assert.EqualValues(t, 3, param(t, pol["ip"], "q"))
		assert.EqualValues(t, 3600, param(t, pol["tenant"], "w"))
		names, rl := sfItems(t, hdr, "ratelimit")
		assert.Equal(t, []string{"ip", "tenant"}, names)
		assert.EqualValues(t, tc.ip, param(t, rl["ip"], "r"), "call %d: the IP rule", i+1)
		assert.EqualValues(t, tc.tenRem, param(t, rl["tenant"], "r"), "call %d: the tenant rule", i+1)
		limits := map[string]string{"ip": "3", "tenant": "2"}
		assert.Equal(t, []string{limits[tc.binding]}, hdr.Get("x-ratelimit-limit"), "call %d: the legacy fields speak of the binding rule", i+1)
		if tc.code != codes.OK {
			assert.Equal(t, "rule:"+tc.binding, violation(t, st), "call %d", i+1)
			assert.NotEmpty(t, hdr.Get("retry-after"))
		}
	}
}

// TestIdentityHook: Config.Key and Rule.Key are any function of the call's
// context and method; here the user of a bearer token in the metadata,
// and a per-method key.
func TestIdentityHook(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t,
		policy.Rule{Name: "user", Limit: 2, Window: time.Minute},
		policy.Rule{Name: "method", Limit: 10, Window: time.Minute},
	)
	seen := make(chan string, 16)
	bearer := func(ctx context.Context, fullMethod string) (string, error) {
		seen <- fullMethod
		vs := metadata.ValueFromIncomingContext(ctx, "authorization")
		if len(vs) == 0 || len(vs[0]) <= len("Bearer ") {
			return "", fmt.Errorf("%w: no bearer token", grpclimit.ErrNoIdentity)
		}
		return "u:" + vs[0][len("Bearer "):], nil
	}
	perMethod := func(_ context.Context, fullMethod string) (string, error) { return "method:" + fullMethod, nil }
	conn := serve(t, grpclimit.Config{Limiter: lim, Key: bearer, Routes: []grpclimit.Route{{
		Pattern: "/sluice.test.Echo/*",
		Rules:   []grpclimit.Rule{{Name: "user"}, {Name: "method", Key: perMethod}},
	}}}, nil, nil)
	as := func(user string) context.Context {
		if user == "" {
			return t.Context()
		}
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+user)
	}
	type want struct {
		code         codes.Code
		userR, methR int64
	}
	for i, tc := range []struct {
		user, method string
		want         want
	}{
		{"ann", "Say", want{codes.OK, 1, 9}},
		{"ann", "Shout", want{codes.OK, 0, 9}},
		{"ann", "Say", want{codes.ResourceExhausted, 0, 9}}, // the method rule keeps its count
		{"bob", "Say", want{codes.OK, 1, 8}},
	} {
		st, hdr := call(t, as(tc.user), conn, "/sluice.test.Echo/"+tc.method)
		require.Equal(t, tc.want.code, st.Code(), "call %d: %v", i+1, st)
		_, rl := sfItems(t, hdr, "ratelimit")
		assert.EqualValues(t, tc.want.userR, param(t, rl["user"], "r"), "call %d", i+1)
		assert.EqualValues(t, tc.want.methR, param(t, rl["method"], "r"), "call %d", i+1)
		assert.Equal(t, "/sluice.test.Echo/"+tc.method, <-seen, "the hook hears the method")
	}
	st, hdr := call(t, as(""), conn, "/sluice.test.Echo/Say")
	assert.Equal(t, codes.Unauthenticated, st.Code(), "no identity is answered, not bucketed")
	assert.Empty(t, hdr.Get("ratelimit"), "and not checked")
	st, _ = call(t, as(""), conn, healthpb.Health_Check_FullMethodName)
	assert.Equal(t, codes.OK, st.Code(), "no route: not limited, no key asked")
}

// TestPatternPrecedence: a method's own pattern wins over its service's,
// which wins over "*"; an Unlimited route exempts its calls; a call no
// route matches is not limited.
func TestPatternPrecedence(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t,
		policy.Rule{Name: "all", Limit: 100, Window: time.Minute},
		policy.Rule{Name: "echo", Limit: 100, Window: time.Minute},
		policy.Rule{Name: "shout", Limit: 1, Window: time.Minute},
	)
	rules := func(name string) []grpclimit.Rule { return []grpclimit.Rule{{Name: name}} }
	conn := serve(t, grpclimit.Config{Limiter: lim, Routes: []grpclimit.Route{
		{Pattern: "*", Rules: rules("all")},
		{Pattern: "/sluice.test.Echo/Shout", Rules: rules("shout")}, // listed before its service: order does not matter
		{Pattern: "/sluice.test.Echo/*", Rules: rules("echo")},
		{Pattern: healthpb.Health_Watch_FullMethodName, Unlimited: true},
	}}, nil, nil)
	for _, tc := range []struct{ method, rule string }{
		{"/sluice.test.Echo/Shout", "shout"},
		{"/sluice.test.Echo/Say", "echo"},
		{healthpb.Health_Check_FullMethodName, "all"},
	} {
		st, hdr := call(t, t.Context(), conn, tc.method)
		require.Equal(t, codes.OK, st.Code(), tc.method)
		names, _ := sfItems(t, hdr, "ratelimit-policy")
		assert.Equal(t, []string{tc.rule}, names, tc.method)
	}
	st, _ := call(t, t.Context(), conn, "/sluice.test.Echo/Shout")
	assert.Equal(t, codes.ResourceExhausted, st.Code(), "Shout's own rule, 1 a minute, binds")
	st, _ = call(t, t.Context(), conn, "/sluice.test.Echo/Say")
	assert.Equal(t, codes.OK, st.Code(), "Say is under the service's rule")

	health := healthpb.NewHealthClient(conn)
	for i := range 3 {
		s, err := health.Watch(t.Context(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		_, err = s.Recv()
		require.NoError(t, err, "stream %d: Watch is Unlimited", i+1)
		hdr, err := s.Header()
		require.NoError(t, err)
		assert.Empty(t, hdr.Get("ratelimit-policy"), "an Unlimited call is not checked")
	}

	// Without a "*" route, a call no pattern matches is not limited.
	conn = serve(t, grpclimit.Config{Limiter: lim, Methods: map[string]string{"/sluice.test.Echo/*": "echo"}}, nil, nil)
	st, _ = call(t, t.Context(), conn, healthpb.Health_Check_FullMethodName)
	assert.Equal(t, codes.OK, st.Code())
	st, hdr := call(t, t.Context(), conn, "/sluice.test.Echo/Say")
	require.Equal(t, codes.OK, st.Code())
	names, _ := sfItems(t, hdr, "ratelimit-policy")
	assert.Equal(t, []string{"echo"}, names, "Config.Methods takes wildcards too")
}

// TestRoutesRefused: each misconfiguration of the routes is an error of
// the constructor that says what is wrong.
func TestRoutesRefused(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "a", Limit: 5, Window: time.Minute}, policy.Rule{Name: "b", Limit: 5, Window: time.Minute})
	one := []grpclimit.Rule{{Name: "a"}}
	nine := make([]grpclimit.Rule, 9)
	for i := range nine {
		nine[i] = grpclimit.Rule{Name: "a", Key: grpclimit.Metadata(fmt.Sprint(i))}
	}
	for _, tc := range []struct {
		name string
		cfg  grpclimit.Config
		want string
	}{
		{"no leading slash", grpclimit.Config{Routes: []grpclimit.Route{{Pattern: "pkg.Svc/M", Rules: one}}}, "does not start with /"},
		{"no method", grpclimit.Config{Routes: []grpclimit.Route{{Pattern: "/pkg.Svc/", Rules: one}}}, "no method"},
		{"no service", grpclimit.Config{Routes: []grpclimit.Route{{Pattern: "/M", Rules: one}}}, "no service"},
		{"wildcard in a service", grpclimit.Config{Routes: []grpclimit.Route{{Pattern: "/pkg.*/M", Rules: one}}}, "service name"},
		{"partial wildcard", grpclimit.Config{Routes: []grpclimit.Route{{Pattern: "/pkg.Svc/Get*", Rules: one}}}, "whole method name"},
		{"pattern twice", grpclimit.Config{Rule: "a", Routes: []grpclimit.Route{{Pattern: "*", Rules: one}}}, `"*" appears twice`},
		{"pattern twice in Methods and Routes", grpclimit.Config{Methods: map[string]string{"/p.S/*": "b"}, Routes: []grpclimit.Route{{Pattern: "/p.S/*", Rules: one}}}, "appears twice"},
		{"no rules", grpclimit.Config{Routes: []grpclimit.Route{{Pattern: "*"}}}, "Unlimited"},
		{"unlimited with rules", grpclimit.Config{Routes: []grpclimit.Route{{Pattern: "*", Rules: one, Unlimited: true}}}, "choose one"},
		{"only unlimited", grpclimit.Config{Methods: map[string]string{"*": ""}}, "every route is Unlimited"},
		{"nine rules", grpclimit.Config{Routes: []grpclimit.Route{{Pattern: "*", Rules: nine}}}, "at most 8"},
		{"a rule twice", grpclimit.Config{Routes: []grpclimit.Route{{Pattern: "*", Rules: []grpclimit.Rule{{Name: "a"}, {Name: "a"}}}}}, "twice under the same key"},
		{"unknown rule", grpclimit.Config{Routes: []grpclimit.Route{{Pattern: "*", Rules: []grpclimit.Rule{{Name: "a"}, {Name: "zz"}}}}}, `"zz"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Limiter, tc.cfg.ErrorMode = lim, grpclimit.ErrorReject
			_, err := grpclimit.UnaryServerInterceptor(tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	t.Cleanup(func() { // after the subtests
		// A refused config holds no rule: both rules can be dropped.
		require.NoError(t, lim.SetRules(policy.Rule{Name: "other", Limit: 1, Window: time.Minute}))
	})
}
