package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// Put a limiter in front of a ServeMux: 2 requests per minute per client
// IP on /api/, with every header and a problem+json 429.
func ExampleNew() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "api", Limit: 2, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	limit, err := httplimit.New(httplimit.Config{
		Limiter:   limiter,
		Routes:    []httplimit.Route{{Pattern: "/api/", Rules: []httplimit.Rule{{Name: "api"}}}},
		ErrorMode: httplimit.ErrorReject,
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	h := limit(mux)

	for range 3 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/api/x", nil)
		r.RemoteAddr = "192.0.2.1:5555"
		h.ServeHTTP(w, r)
		rl, _, _ := strings.Cut(w.Header().Get("RateLimit"), ";t=") // t: seconds to the reset
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), rl)
	}
	// Output:
	// 200 "api";q=2;w=60 "api";r=1
	// 200 "api";q=2;w=60 "api";r=0
	// 429 "api";q=2;w=60 "api";r=0
}

// Behind a load balancer, key by the client address its X-Forwarded-For
// names: read only on requests from the balancer, walked from the right.
func ExampleClientIP_Key() {
	key, err := httplimit.ClientIP{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Header:         httplimit.XForwardedFor,
	}.Key()
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.5:40000" // the balancer
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.7")
	fmt.Println(key(r))
	r.RemoteAddr = "203.0.113.9:40000" // a client that reached the service directly
	fmt.Println(key(r))
	// Output:
	// 198.51.100.7 <nil>
	// 203.0.113.9 <nil>
}

// Addr returns the client address itself, not grouped.
func ExampleClientIP_Addr() {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "[2001:db8:1:2::99]:443"
	a, err := httplimit.ClientIP{}.Addr(r)
	fmt.Println(a, err)
	// Output: 2001:db8:1:2::99 <nil>
}

// PeerIP groups IPv6 clients by their /64.
func ExamplePeerIP() {
	key := httplimit.PeerIP()
	for _, remote := range []string{"192.0.2.1:1234", "[2001:db8:1:2::1]:1234", "[2001:db8:1:2:ffff::7]:1234"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		fmt.Println(key(r))
	}
	// Output:
	// 192.0.2.1 <nil>
	// 2001:db8:1:2::/64 <nil>
	// 2001:db8:1:2::/64 <nil>
}

// Key by an API key, hashed so that the secret never reaches the store.
func ExampleHeader() {
	key := httplimit.Hashed(httplimit.Header("X-API-Key"))
	r := httptest.NewRequest("GET", "/", nil)
	_, err := key(r)
	fmt.Println(err)
	r.Header.Set("X-API-Key", "k1")
	k, _ := key(r)
	fmt.Println(len(k))
	// Output:
	// httplimit: no client identity: no X-Api-Key header
	// 44
}

// Hashed bounds any key to 44 bytes.
func ExampleHashed() {
	key := httplimit.Hashed(httplimit.Header("X-Tenant"))
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Tenant", "acme")
	fmt.Println(key(r))
	// Output: #gLFs9GbBmfVjlySsS1YrwaT1wJ1_x5XqKjAQrEZWAlQ <nil>
}

type userKey2 struct{}

// Key by the user an authentication middleware put in the context.
func ExampleUser() {
	key := httplimit.User(func(ctx context.Context) (string, bool) {
		u, ok := ctx.Value(userKey2{}).(string)
		return u, ok
	})
	r := httptest.NewRequest("GET", "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), userKey2{}, "ann"))
	fmt.Println(key(r))
	// Output: u:ann <nil>
}

// FirstOf: the user when authenticated, else the client IP.
func ExampleFirstOf() {
	key := httplimit.FirstOf(httplimit.Header("X-User"), httplimit.PeerIP())
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	fmt.Println(key(r))
	r.Header.Set("X-User", "ann")
	fmt.Println(key(r))
	// Output:
	// 192.0.2.1 <nil>
	// h:ann <nil>
}

// Composite: one bucket per tenant and client IP.
func ExampleComposite() {
	key := httplimit.Composite(httplimit.Header("X-Tenant"), httplimit.PeerIP())
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	r.Header.Set("X-Tenant", "acme")
	fmt.Println(key(r))
	// Output: 6:h:acme9:192.0.2.1 <nil>
}

// A custom denial keeps the headers the middleware set.
func ExampleProblem_Write() {
	w := httptest.NewRecorder()
	httplimit.Problem{Type: "https://example.com/probs/quota", Title: "Quota exceeded", Status: 429, Detail: "upgrade your plan", RetryAfter: 30}.Write(w)
	fmt.Println(w.Code, w.Header().Get("Content-Type"))
	fmt.Println(w.Body.String())
	// Output:
	// 429 application/problem+json
	// {"type":"https://example.com/probs/quota","title":"Quota exceeded","status":429,"detail":"upgrade your plan","retry-after":30}
}

// PolicyField and RateLimitField serialize the IETF fields for another
// transport.
func ExamplePolicyField() {
	v, err := httplimit.PolicyField(
		policy.Rule{Name: "burst", Limit: 10, Window: time.Second},
		policy.Rule{Name: "daily", Limit: 1000, Window: 24 * time.Hour},
	)
	fmt.Println(v, err)
	// Output: "burst";q=10;w=1, "daily";q=1000;w=86400 <nil>
}

func ExampleRateLimitField() {
	v, err := httplimit.RateLimitField("api", sluice.Decision{Limit: 100, Remaining: 42, ResetAfter: 17500 * time.Millisecond})
	fmt.Println(v, err)
	// Output: "api";r=42;t=18 <nil>
}

// Layered rules: 2 per minute and 3 per hour for one client, counted all
// or none, each with its own item in the IETF fields.
func ExampleNew_layered() {
	limiter, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "minute", Limit: 2, Window: time.Minute},
		policy.Rule{Name: "hour", Limit: 3, Window: time.Hour},
	)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	limit, err := httplimit.New(httplimit.Config{
		Limiter:   limiter,
		Routes:    []httplimit.Route{{Pattern: "/", Rules: []httplimit.Rule{{Name: "minute"}, {Name: "hour"}}}},
		ErrorMode: httplimit.ErrorReject,
	})
	if err != nil {
		log.Fatal(err)
	}
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 3 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:5555"
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
		fmt.Println("   ", w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("X-RateLimit-Limit"))
	}
	// Output:
	// 200 "minute";q=2;w=60, "hour";q=3;w=3600
	//     1 2
	// 200 "minute";q=2;w=60, "hour";q=3;w=3600
	//     0 2
	// 429 "minute";q=2;w=60, "hour";q=3;w=3600
	//     0 2
}

// A route that names an InFlight rule holds one of its slots while the
// request runs: here at most one report is built at a time per client.
func ExampleNew_inFlight() {
	limiter, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "reports", Limit: 1, InFlight: true},
	)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	limit, err := httplimit.New(httplimit.Config{
		Limiter:   limiter,
		Routes:    []httplimit.Route{{Pattern: "/reports", Rules: []httplimit.Rule{{Name: "reports"}}}},
		ErrorMode: httplimit.ErrorReject,
	})
	if err != nil {
		log.Fatal(err)
	}
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	send := func() {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/reports", nil)
		r.RemoteAddr = "192.0.2.1:5555"
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Retry-After"))
	}
	// Another request of the client is in flight: it holds the slot.
	slot, _, err := limiter.Acquire(context.Background(), "reports", "192.0.2.1")
	if err != nil {
		log.Fatal(err)
	}
	send()
	slot.Release()
	send()
	// Output:
	// 503 1
	// 200
}
