// Command quickstart is the README's quick start, a rate-limited HTTP endpoint.
//
// Requests are limited per client IP across a fleet, through a shared Redis.
package main

import (
	"cmp"
	"context"
	"errors"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: cmp.Or(os.Getenv("REDIS_ADDR"), "127.0.0.1:6379")})
	defer rdb.Close()
	limiter, err := sluice.New(sluice.Options{
		Redis:       rdb,
		Prefix:      "quickstart", // this service's own key space on a shared Redis
		ErrorBudget: 0.01,         // the fleet admits at most 1% over each limit
	},
		policy.Rule{Name: "api", Limit: 1000, Window: time.Minute},
		policy.Rule{Name: "login", Limit: 5, Window: 15 * time.Minute, Mode: policy.Strict},
	)
	if err != nil {
		log.Fatal(err) // the error says what is wrong with the options or rules
	}
	defer limiter.Close() // pushes the last counts to Redis

	mux := http.NewServeMux()
	mux.HandleFunc("/api", func(w http.ResponseWriter, r *http.Request) {
		ip, _, _ := net.SplitHostPort(r.RemoteAddr)
		d, err := limiter.Allow(r.Context(), "api", ip)
		if err != nil { // the check could not be made: a denial is never an error
			http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
		w.Header().Set("X-RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
		if !d.Allowed {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.RetryAfter.Seconds()))))
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		_, _ = w.Write([]byte("hello\n"))
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: mux}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	log.Println("listening on http://127.0.0.1:8080/api (Ctrl-C to stop)")
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Print(err)
	}
}
