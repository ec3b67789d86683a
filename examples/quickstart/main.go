// Command quickstart is the README's quick start: an HTTP endpoint limited
// per client IP across a fleet, through a shared Redis.
package main

import (
	"cmp"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: cmp.Or(os.Getenv("REDIS_ADDR"), "127.0.0.1:6379")})
	limiter, err := sluice.New(sluice.Options{Redis: rdb, Prefix: "quickstart", ErrorBudget: 0.01},
		policy.Rule{Name: "api", Limit: 100, Window: time.Minute}) // 100 a minute per client, fleet-wide
	if err != nil {
		log.Fatal(err) // says what is wrong with the options or the rules
	}
	defer limiter.Close() // pushes the last counts to Redis

	limit, err := httplimit.New(httplimit.Config{
		Limiter:   limiter,
		Routes:    []httplimit.Route{{Pattern: "/api/", Rules: []httplimit.Rule{{Name: "api"}}}},
		Key:       httplimit.PeerIP(),    // behind a proxy: httplimit.ClientIP{...}.Key()
		ErrorMode: httplimit.ErrorReject, // a check that cannot be made: 503
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("hello\n")) })
	log.Print(http.ListenAndServe("127.0.0.1:8080", limit(mux))) // Close runs after a listen error; SIGTERM: see getting-started
}
