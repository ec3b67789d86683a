package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// nopWriter is a ResponseWriter that keeps its header map between requests
// (cleared, not reallocated), so that the benchmark counts the middleware's
// allocations and not the recorder's.
type nopWriter struct {
	h    http.Header
	code int
}

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(code int)        { w.code = code }

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })

// benchHandler returns the middleware around okHandler, on a local limiter
// whose limit no benchmark reaches.
func benchHandler(tb testing.TB, omit httplimit.Headers) http.Handler {
	return benchHandlerRules(tb, omit, "api")
}

// benchHandlerRules is benchHandler with the route's rules layered.
func benchHandlerRules(tb testing.TB, omit httplimit.Headers, names ...string) http.Handler {
	var rules []policy.Rule
	var layers []httplimit.Rule
	for _, n := range names {
		rules = append(rules, policy.Rule{Name: n, Limit: policy.MaxLimit, Window: time.Hour})
		layers = append(layers, httplimit.Rule{Name: n})
	}
	lim, err := sluice.New(sluice.Options{}, rules...)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = lim.Close() })
	mw, err := httplimit.New(httplimit.Config{
		Limiter:     lim,
		Routes:      []httplimit.Route{{Pattern: "/", Rules: layers}},
		ErrorMode:   httplimit.ErrorReject,
		OmitHeaders: omit,
	})
	require.NoError(tb, err)
	return mw(okHandler)
}

func benchRequest() *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "http://example.com/api/items", nil)
	r.RemoteAddr = "192.0.2.7:41234"
	return r
}

const allHeaders = httplimit.HeaderRateLimitPolicy | httplimit.HeaderRateLimit | httplimit.HeaderXRateLimit | httplimit.HeaderRetryAfter

func serveLoop(b *testing.B, h http.Handler) {
	r := benchRequest()
	w := &nopWriter{h: make(http.Header)}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}

// BenchmarkMiddleware serves one admitted request per iteration: the bare
// handler, the middleware with every header, and without headers.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("bare", func(b *testing.B) { serveLoop(b, okHandler) })
	b.Run("headers", func(b *testing.B) { serveLoop(b, benchHandler(b, 0)) })
	b.Run("no-headers", func(b *testing.B) { serveLoop(b, benchHandler(b, allHeaders)) })
	b.Run("layered-2", func(b *testing.B) { serveLoop(b, benchHandlerRules(b, 0, "second", "hour")) })
}

// BenchmarkOverhead reports the middleware's overhead over the bare
// handler in the same run: each iteration serves a chunk of requests with
// the bare handler, then the same number through the middleware with every
// header, then without headers, so that all three see the same machine.
// Its metrics are per request: bare-ns, headers-ns, no-headers-ns, and
// overhead-ns (headers-ns less bare-ns).
func BenchmarkOverhead(b *testing.B) {
	const chunk = 256
	handlers := []http.Handler{okHandler, benchHandler(b, 0), benchHandler(b, allHeaders)}
	r := benchRequest()
	w := &nopWriter{h: make(http.Header)}
	var spent [3]time.Duration
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		for i, h := range handlers {
			t0 := time.Now()
			for range chunk {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
			spent[i] += time.Since(t0)
		}
		n += chunk
	}
	per := func(d time.Duration) float64 { return float64(d) / float64(n) }
	b.ReportMetric(per(spent[0]), "bare-ns/req")
	b.ReportMetric(per(spent[1]), "headers-ns/req")
	b.ReportMetric(per(spent[2]), "no-headers-ns/req")
	b.ReportMetric(per(spent[1]-spent[0]), "overhead-ns/req")
}
