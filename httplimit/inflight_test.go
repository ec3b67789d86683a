package httplimit_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// slotRoutes is one route "/" that holds a slot of rule.
func slotRoutes(rules ...string) []httplimit.Route {
	rt := httplimit.Route{Pattern: "/"}
	for _, name := range rules {
		rt.Rules = append(rt.Rules, httplimit.Rule{Name: name})
	}
	return []httplimit.Route{rt}
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

// TestInFlightHoldsSlots sends 5 slow requests at once under a limit of 2
// in flight: exactly 2 run together, 3 are refused with 503 and
// Retry-After: 1, and once the 2 return their slots are free again.
func TestInFlightHoldsSlots(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "slots", Limit: 2, InFlight: true})
	mw, err := httplimit.New(httplimit.Config{Limiter: lim, Routes: slotRoutes("slots"), ErrorMode: httplimit.ErrorReject})
	require.NoError(t, err)
	var running, most atomic.Int64
	entered, gate := make(chan struct{}, 5), make(chan struct{})
	url, c := serve(t, mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		entered <- struct{}{}
		<-gate
		running.Add(-1)
		_, _ = io.WriteString(w, "ok\n")
	})))
	opened := false
	t.Cleanup(func() { // before the server's Close, which waits for the handlers
		if !opened {
			close(gate)
		}
	})

	type result struct {
		resp *http.Response
		body []byte
	}
	results := make(chan result, 5)
	for range 5 {
		go func() {
			resp, err := c.Get(url)
			if err != nil {
				results <- result{}
				return
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			results <- result{resp, body}
		}()
	}
	// The 3 refused answer while the 2 admitted are held at the gate.
	for range 3 {
		res := recv(t, results)
		require.NotNil(t, res.resp)
		assert.Equal(t, http.StatusServiceUnavailable, res.resp.StatusCode)
		assert.Equal(t, "1", res.resp.Header.Get("Retry-After"))
		assert.Empty(t, res.resp.Header.Get("RateLimit"))
		assert.Empty(t, res.resp.Header.Get("RateLimit-Policy"))
		assert.Empty(t, res.resp.Header.Get("X-RateLimit-Limit"))
		p := checkProblem(t, res.resp, res.body)
		assert.Contains(t, p["detail"], `"slots"`)
	}
	recv(t, entered)
	recv(t, entered)
	assert.False(t, slotsFree(t, lim, "slots", "127.0.0.1", 1), "the 2 running requests hold both slots")
	close(gate)
	opened = true
	for range 2 {
		res := recv(t, results)
		require.NotNil(t, res.resp)
		assert.Equal(t, http.StatusOK, res.resp.StatusCode)
		assert.Empty(t, res.resp.Header.Get("Retry-After"))
	}
	assert.Equal(t, int64(2), most.Load())
	assert.True(t, slotsFree(t, lim, "slots", "127.0.0.1", 2), "the slots are free once the handlers returned")
}

// TestInFlightReleasedOnEveryEnding checks that a slot is given back when
// the handler panics, when the client cancels, and when the handler
// hijacks the connection (at its return, the connection still open).
func TestInFlightReleasedOnEveryEnding(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, policy.Rule{Name: "one", Limit: 1, InFlight: true})
	mw, err := httplimit.New(httplimit.Config{Limiter: lim, Routes: slotRoutes("one"), ErrorMode: httplimit.ErrorReject})
	require.NoError(t, err)
	entered := make(chan struct{}, 1)
	returned := make(chan struct{}, 1)
	limitedH := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic("handler failed")
		case "/wait":
			entered <- struct{}{}
			<-r.Context().Done()
		case "/hijack":
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
			_ = buf.Flush()
			go func() { // the connection outlives the handler
				_, _ = io.Copy(io.Discard, conn)
				_ = conn.Close()
			}()
		default:
			_, _ = io.WriteString(w, "ok\n")
		}
	}))
	// Outside the middleware: a recover that answers 500, and a signal
	// once the middleware has returned.
	url, c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if recover() != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
			if r.URL.Path == "/wait" || r.URL.Path == "/hijack" {
				returned <- struct{}{}
			}
		}()
		limitedH.ServeHTTP(w, r)
	}))

	t.Run("panic", func(t *testing.T) {
		for range 3 {
			resp, _ := get(t, c, url+"/panic", nil)
			assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
		}
		resp, _ := get(t, c, url+"/", nil)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.True(t, slotsFree(t, lim, "one", "127.0.0.1", 1))
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/wait", nil)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			resp, err := c.Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			done <- err
		}()
		recv(t, entered)
		resp, _ := get(t, c, url+"/", nil)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the waiting request holds the slot")
		cancel()
		assert.ErrorIs(t, recv(t, done), context.Canceled)
		recv(t, returned)
		resp, _ = get(t, c, url+"/", nil)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	})
	t.Run("hijack", func(t *testing.T) {
		conn, err := net.Dial("tcp", url[len("http://"):])
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		_, err = io.WriteString(conn, "GET /hijack HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		_ = resp.Body.Close()
		// The connection is open; once the handler has returned (its
		// response was flushed before), the slot is free.
		recv(t, returned)
		resp, _ = get(t, c, url+"/", nil)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	})
}

// TestInFlightAfterRates checks a route with a rate rule and an InFlight
// rule: the rate is checked first, so a denied request takes no slot; a
// request refused a slot keeps the rate rule's headers.
func TestInFlightAfterRates(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t,
		policy.Rule{Name: "rate", Limit: 2, Window: 2 * time.Minute},
		policy.Rule{Name: "one", Limit: 1, InFlight: true})
	held, _, err := lim.Acquire(context.Background(), "one", "127.0.0.1")
	require.NoError(t, err)
	url, c := limited(t, lim, httplimit.Config{Routes: slotRoutes("rate", "one")})

	resp, _ := get(t, c, url, nil)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the slot is held elsewhere")
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Equal(t, "1", resp.Header.Get("X-RateLimit-Remaining"), "the rate rule counted it")
	assert.NotContains(t, resp.Header.Get("RateLimit-Policy"), `"one"`)
	held.Release()

	resp, _ = get(t, c, url, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `"rate";q=2;w=120`, resp.Header.Get("RateLimit-Policy"))
	resp, _ = get(t, c, url, nil)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.True(t, slotsFree(t, lim, "one", "127.0.0.1", 1), "a denied request takes no slot")
}

// TestInFlightAcquireError checks that an Acquire error follows the
// ErrorMode, as a rate check's does.
func TestInFlightAcquireError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode httplimit.ErrorMode
		want int
	}{
		{httplimit.ErrorReject, http.StatusServiceUnavailable},
		{httplimit.ErrorServe, http.StatusOK},
	} {
		lim, err := sluice.New(sluice.Options{}, policy.Rule{Name: "one", Limit: 1, InFlight: true})
		require.NoError(t, err)
		reported := make(chan error, 1)
		url, c := limited(t, lim, httplimit.Config{Routes: slotRoutes("one"), ErrorMode: tc.mode,
			ReportError: func(_ *http.Request, err error) { reported <- err }})
		require.NoError(t, lim.Close())
		resp, _ := get(t, c, url, nil)
		assert.Equal(t, tc.want, resp.StatusCode)
		assert.Empty(t, resp.Header.Get("Retry-After"))
		assert.ErrorIs(t, recv(t, reported), sluice.ErrClosed)
	}
}

// TestInFlightConfigErrors checks what New refuses.
func TestInFlightConfigErrors(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t,
		policy.Rule{Name: "rate", Limit: 2, Window: 2 * time.Minute},
		policy.Rule{Name: "one", Limit: 1, InFlight: true})
	cost := func(*http.Request) int64 { return 2 }
	for _, tc := range []struct {
		name   string
		routes []httplimit.Route
		want   string
	}{
		{"unknown", slotRoutes("nope"), `rule "nope": the limiter has no such rule`},
		{"cost on slots only", []httplimit.Route{{Pattern: "/", Rules: []httplimit.Rule{{Name: "one"}}, Cost: cost}}, "a Cost with only InFlight rules"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := httplimit.New(httplimit.Config{Limiter: lim, Routes: tc.routes, ErrorMode: httplimit.ErrorReject})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := httplimit.New(httplimit.Config{Limiter: lim, ErrorMode: httplimit.ErrorReject,
		Routes: []httplimit.Route{{Pattern: "/", Rules: []httplimit.Rule{{Name: "rate"}, {Name: "one"}}, Cost: cost}}})
	assert.NoError(t, err, "a Cost weighs the rate rules of a mixed route")

	// A reload cannot leave out an InFlight rule a route holds.
	mw, err := httplimit.New(httplimit.Config{Limiter: lim, Routes: slotRoutes("one"), ErrorMode: httplimit.ErrorReject})
	require.NoError(t, err)
	err = lim.SetRules(policy.Rule{Name: "rate", Limit: 2, Window: 2 * time.Minute})
	assert.ErrorIs(t, err, sluice.ErrRuleInUse)
	runtime.KeepAlive(mw)
}
