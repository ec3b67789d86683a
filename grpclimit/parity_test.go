package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
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
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/vclock"
	"github.com/sluicehq/sluice/policy"
)

// parityRules are the rules of the parity test for algorithm a and a
// limit of "api": api, with a tier of 6 ("gold"), an Unlimited tier
// ("vip") and a Deny tier ("bad"); trial, a shadow rule of 2; burst, 4 with
// a soft band of 50%. Every limit divides the minute into whole seconds,
// so that every reset is a whole number of seconds on the whole-second
// virtual clock.
func parityRules(a policy.Algorithm, limit int64) []policy.Rule {
	return []policy.Rule{
		{Name: "api", Limit: limit, Window: time.Minute, Algorithm: a, Overrides: []policy.Override{
			{Tier: "gold", Keys: []string{"gold-1"}, Limit: 6},
			{Tier: "vip", Keys: []string{"vip"}, Unlimited: true},
			{Tier: "bad", Keys: []string{"bad"}, Deny: true},
		}},
		{Name: "trial", Limit: 2, Window: time.Minute, Algorithm: a, Shadow: true},
		{Name: "burst", Limit: 4, Window: time.Minute, Algorithm: a, Soft: 0.5},
	}
}

// The two front doors of the parity test: "say" checks api alone, "shout"
// layers trial, burst and api; every rule keys the client by x-key (X-Key),
// as is.
const (
	saySay   = "/sluice.test.Echo/Say"
	sayShout = "/sluice.test.Echo/Shout"
)

// xKey keys a call by its x-key metadata, as is (the tiers name such keys).
func xKey(ctx context.Context, _ string) (string, error) {
	if v := metadata.ValueFromIncomingContext(ctx, "x-key"); len(v) > 0 {
		return v[0], nil
	}
	return "", grpclimit.ErrNoIdentity
}

// parityHTTP runs httplimit over lim on a loopback httptest server and
// returns its URL.
func parityHTTP(t *testing.T, lim *sluice.Limiter) string {
	t.Helper()
	mw, err := httplimit.New(httplimit.Config{
		Limiter:   lim,
		ErrorMode: httplimit.ErrorReject,
		Key:       func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil },
		Routes: []httplimit.Route{
			{Pattern: "/say", Rules: []httplimit.Rule{{Name: "api"}}},
			{Pattern: "/shout", Rules: []httplimit.Rule{{Name: "trial"}, {Name: "burst"}, {Name: "api"}}},
		},
	})
	require.NoError(t, err)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
	t.Cleanup(srv.Close)
	return srv.URL
}

// parityGRPC runs grpclimit over lim on a real grpc.Server on a loopback
// TCP port and returns a connection to it.
func parityGRPC(t *testing.T, lim *sluice.Limiter) *grpc.ClientConn {
	t.Helper()
	unary, err := grpclimit.UnaryServerInterceptor(grpclimit.Config{
		Limiter:   lim,
		ErrorMode: grpclimit.ErrorReject,
		Key:       xKey,
		Routes: []grpclimit.Route{
			{Pattern: saySay, Rules: []grpclimit.Rule{{Name: "api"}}},
			{Pattern: sayShout, Rules: []grpclimit.Rule{{Name: "trial"}, {Name: "burst"}, {Name: "api"}}},
		},
	})
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.UnaryInterceptor(unary))
	srv.RegisterService(&echoDesc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// answer is what a front door told its client: the status (an HTTP code,
// or a gRPC code mapped to one) and the rate-limit fields, by their
// lower-case names.
type answer struct {
	status int
	fields map[string][]string
	retry  time.Duration // gRPC: RetryInfo's delay; -1 without one
}

// parityFields are the fields compared.
var parityFields = []string{"ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after"}

func httpAnswer(t *testing.T, c *http.Client, url, key string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("X-Key", key)
	resp, err := c.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	a := answer{status: resp.StatusCode, fields: map[string][]string{}, retry: -1}
	for _, f := range parityFields {
		if v := resp.Header.Values(f); len(v) > 0 {
			a.fields[f] = v
		}
	}
	return a
}

// grpcStatus maps the codes a limited call ends with to HTTP's statuses.
var grpcStatus = map[codes.Code]int{
	codes.OK:                http.StatusOK,
	codes.ResourceExhausted: http.StatusTooManyRequests,
	codes.PermissionDenied:  http.StatusForbidden,
}

func grpcAnswer(t *testing.T, conn *grpc.ClientConn, method, key string) answer {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-key", key)
	var hdr metadata.MD
	err := conn.Invoke(ctx, method, wrapperspb.String("hi"), new(wrapperspb.StringValue), grpc.Header(&hdr))
	st, ok := status.FromError(err)
	require.True(t, ok, "%v", err)
	code, ok := grpcStatus[st.Code()]
	require.True(t, ok, "unexpected status %v", st)
	a := answer{status: code, fields: map[string][]string{}, retry: -1}
	for _, f := range parityFields {
		if v := hdr.Get(f); len(v) > 0 {
			a.fields[f] = v
		}
	}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			a.retry = d.GetRetryDelay().AsDuration()
		case *errdetails.ErrorInfo:
			assert.Equal(t, grpclimit.BlockedReason, d.GetReason())
			assert.Equal(t, codes.PermissionDenied, st.Code(), "ErrorInfo only on a blocked call")
		}
	}
	return a
}

// sfInt parses a field that must be one RFC 9651 sf-integer.
func sfInt(t *testing.T, v []string, at string) int64 {
	t.Helper()
	it, err := httpsfv.UnmarshalItem(v)
	require.NoError(t, err, "%s: %q", at, v)
	n, ok := it.Value.(int64)
	require.True(t, ok, "%s is an sf-integer: %q", at, v)
	return n
}

// sfList parses a field that must be an RFC 9651 List.
func sfList(t *testing.T, v []string, at string) httpsfv.List {
	t.Helper()
	l, err := httpsfv.UnmarshalList(v)
	require.NoError(t, err, "%s: %q", at, v)
	return l
}

// TestHTTPAndGRPCAgree drives the same checks, on the same virtual clock,
// through a real HTTP server with httplimit and a real gRPC server with
// grpclimit, each on its own Limiter of the same rules, for every
// algorithm: one rule and three layered (a shadow rule, a soft band), a
// plain key, a key in a tier, an Unlimited and a Deny tier, across time
// and a reload of the limit. Each answer's status agrees (200 and OK, 429
// and ResourceExhausted, 403 and PermissionDenied), and so does each field
// parsed: RateLimit-Policy and RateLimit as RFC 9651 Lists,
// X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset and
// Retry-After (and gRPC's RetryInfo) as integers.
func TestHTTPAndGRPCAgree(t *testing.T) {
	t.Parallel()
	for _, a := range []policy.Algorithm{policy.SlidingWindow, policy.WeightedWindow, policy.FixedWindow, policy.TokenBucket, policy.GCRA, policy.SlidingLog} {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			c := &vclock.Clock{}
			c.NS.Store(1_800_000_000 * int64(time.Second)) // whole minutes
			var lims [2]*sluice.Limiter
			for i := range lims {
				lim, err := sluice.New(sluice.Options{Clock: c}, parityRules(a, 5)...)
				require.NoError(t, err)
				t.Cleanup(func() { _ = lim.Close() })
				lims[i] = lim
			}
			url := parityHTTP(t, lims[0])
			conn := parityGRPC(t, lims[1])
			hc := &http.Client{}
			t.Cleanup(hc.CloseIdleConnections)

			seen := map[string]int{} // what the sequence exercised
			step := 0
			ask := func(route, key string) {
				t.Helper()
				step++
				at := fmt.Sprintf("step %d: %s as %q", step, route, key)
				method := map[string]string{"say": saySay, "shout": sayShout}[route]
				w0 := time.Now()
				h := httpAnswer(t, hc, url+"/"+route, key)
				g := grpcAnswer(t, conn, method, key)
				w1 := time.Now()

				require.Equal(t, h.status, g.status, "%s: status", at)
				seen[fmt.Sprint(h.status)]++
				for _, f := range parityFields {
					_, inH := h.fields[f]
					_, inG := g.fields[f]
					require.Equal(t, inH, inG, "%s: %s sent by one front door only (HTTP %q, gRPC %q)", at, f, h.fields[f], g.fields[f])
				}
				if len(h.fields) == 0 {
					seen["no fields"]++
				}
				for _, f := range []string{"ratelimit-policy", "ratelimit"} {
					if v, ok := h.fields[f]; ok {
						hl, gl := sfList(t, v, at+": HTTP "+f), sfList(t, g.fields[f], at+": gRPC "+f)
						assert.Equal(t, hl, gl, "%s: %s: HTTP %q, gRPC %q", at, f, v, g.fields[f])
						for _, m := range hl {
							it := m.(httpsfv.Item)
							for _, p := range []string{"sluice-shadow", "sluice-soft"} {
								if _, ok := it.Params.Get(p); ok {
									seen[f+" "+p]++
								}
							}
						}
					}
				}
				for _, f := range []string{"x-ratelimit-limit", "x-ratelimit-remaining", "retry-after"} {
					if v, ok := h.fields[f]; ok {
						assert.Equal(t, sfInt(t, v, at+": HTTP "+f), sfInt(t, g.fields[f], at+": gRPC "+f), "%s: %s", at, f)
					}
				}
				if v, ok := h.fields["retry-after"]; ok {
					assert.Equal(t, sfInt(t, v, at), int64(g.retry/time.Second), "%s: RetryInfo is Retry-After", at)
				} else {
					assert.Equal(t, time.Duration(-1), g.retry, "%s: RetryInfo without Retry-After", at)
				}
				for _, rule := range map[string][]string{"say": {"api"}, "shout": {"trial", "burst", "api"}}[route] {
					p, err := lims[0].Peek(rule, key)
					require.NoError(t, err)
					require.Zero(t, p.ResetAfter%time.Second, "%s: %s resets in %v: the comparison of x-ratelimit-reset below needs whole seconds", at, rule, p.ResetAfter)
				}
				if v, ok := h.fields["x-ratelimit-reset"]; ok {
					// A Unix time on the front doors' wall clock, which
					// moves between the two calls: every reset is a whole
					// number of seconds here, so the two agree unless a
					// wall-clock second began between the calls.
					hr, gr := sfInt(t, v, at+": HTTP reset"), sfInt(t, g.fields["x-ratelimit-reset"], at+": gRPC reset")
					if w0.Unix() == w1.Unix() {
						assert.Equal(t, hr, gr, "%s: x-ratelimit-reset", at)
					} else {
						assert.Contains(t, []int64{hr, hr + 1}, gr, "%s: x-ratelimit-reset across a wall-clock second", at)
					}
				}
			}
			times := func(n int, route, key string) {
				t.Helper()
				for range n {
					ask(route, key)
				}
			}
			advance := func(d time.Duration) { c.NS.Add(int64(d)) }

			times(7, "say", "plain")  // 5 admitted, then denied
			times(8, "say", "gold-1") // its tier's 6, then denied
			times(3, "say", "vip")    // unlimited: no fields
			times(2, "say", "bad")    // blocked
			advance(7 * time.Second)
			times(2, "say", "plain")
			times(8, "shout", "carol") // trial would deny from the 3rd, burst's soft band from the 5th, api denies the 6th
			times(2, "shout", "vip")   // api puts no limit on it: trial's and burst's items only
			times(2, "shout", "bad")   // blocked by api, whatever the others say
			advance(13 * time.Second)
			times(2, "shout", "carol")

			// A reload of api's limit, on both limiters at the same instant.
			for _, lim := range lims {
				require.NoError(t, lim.SetRules(parityRules(a, 10)...))
			}
			times(3, "say", "plain")
			times(2, "say", "gold-1")
			times(3, "shout", "carol")
			times(2, "say", "vip")
			times(1, "say", "bad")
			advance(30 * time.Second)
			times(12, "say", "dave")
			times(2, "shout", "dave")
			advance(61 * time.Second)
			times(2, "say", "plain")
			times(2, "shout", "carol")

			for _, what := range []string{"200", "429", "403", "no fields", "ratelimit sluice-shadow", "ratelimit-policy sluice-shadow", "ratelimit sluice-soft"} {
				assert.Positive(t, seen[what], "the sequence never exercised %q: %v", what, seen)
			}
		})
	}
}

// TestFieldsFollowReload: over gRPC alone, after a reload of the limit
// every call is told the new limit (q and x-ratelimit-limit), a tier its
// own, and an Unlimited tier nothing.
func TestFieldsFollowReload(t *testing.T) {
	t.Parallel()
	c := &vclock.Clock{}
	c.NS.Store(1_800_000_000 * int64(time.Second))
	lim, err := sluice.New(sluice.Options{Clock: c}, parityRules(policy.SlidingWindow, 5)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	conn := parityGRPC(t, lim)
	check := func(key string, q int64, remaining int64) {
		t.Helper()
		g := grpcAnswer(t, conn, saySay, key)
		require.Equal(t, http.StatusOK, g.status, key)
		pol := sfList(t, g.fields["ratelimit-policy"], key)
		require.Len(t, pol, 1, key)
		it := pol[0].(httpsfv.Item)
		assert.Equal(t, "api", it.Value, key)
		v, _ := it.Params.Get("q")
		assert.Equal(t, q, v, key)
		assert.Equal(t, q, sfInt(t, g.fields["x-ratelimit-limit"], key), key)
		assert.Equal(t, remaining, sfInt(t, g.fields["x-ratelimit-remaining"], key), key)
	}
	check("plain", 5, 4)
	check("gold-1", 6, 5)
	require.NoError(t, lim.SetRules(parityRules(policy.SlidingWindow, 10)...))
	check("plain", 10, 8) // a window keeps its counts
	check("gold-1", 6, 4)
	g := grpcAnswer(t, conn, saySay, "vip")
	assert.Equal(t, http.StatusOK, g.status)
	assert.Empty(t, g.fields, "an Unlimited tier is told nothing")
}

// TestBlockedCall: a call of a Deny tier ends with PermissionDenied and an
// ErrorInfo naming the rule, without retry-after or RetryInfo, and uses up
// nothing of the route's other rules.
func TestBlockedCall(t *testing.T) {
	t.Parallel()
	lim, err := sluice.New(sluice.Options{}, parityRules(policy.SlidingWindow, 5)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	conn := parityGRPC(t, lim)
	for _, method := range []string{saySay, sayShout} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-key", "bad")
		var hdr metadata.MD
		err := conn.Invoke(ctx, method, wrapperspb.String("hi"), new(wrapperspb.StringValue), grpc.Header(&hdr))
		st := status.Convert(err)
		require.Equal(t, codes.PermissionDenied, st.Code(), method)
		assert.Contains(t, st.Message(), `"api"`, method)
		assert.Empty(t, hdr.Get("retry-after"), method)
		assert.Empty(t, hdr.Get("x-ratelimit-limit"), method)
		var info *errdetails.ErrorInfo
		for _, d := range st.Details() {
			_, retry := d.(*errdetails.RetryInfo)
			assert.False(t, retry, "%s: a blocked call is not told to retry", method)
			if e, ok := d.(*errdetails.ErrorInfo); ok {
				info = e
			}
		}
		require.NotNil(t, info, method)
		assert.Equal(t, grpclimit.BlockedReason, info.GetReason())
		assert.Equal(t, grpclimit.ErrorDomain, info.GetDomain())
		assert.Equal(t, "api", info.GetMetadata()["rule"])
	}
	p, err := lim.Peek("burst", "bad")
	require.NoError(t, err)
	assert.EqualValues(t, 4, p.Remaining, "a blocked call uses up nothing of the other rules")
}
