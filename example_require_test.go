package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// Stats is a snapshot of a limiter's counters: how many keys it tracks,
// its estimate of the live instances, whether it sees the store as
// unreachable, and the syncer's counters (zero without a store).
func ExampleLimiter_Stats() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "api", Limit: 10, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	ctx := context.Background()
	for _, ip := range []string{"198.51.100.7", "198.51.100.8", "198.51.100.7"} {
		if _, err := limiter.Allow(ctx, "api", ip); err != nil {
			log.Fatal(err)
		}
	}
	st := limiter.Stats()
	fmt.Println("keys:", st.Keys, "degraded:", st.Degraded)
	// Output: keys: 2 degraded: false
}

// Require keeps the rules a caller checks in force: until release, a
// reload that leaves one of them out is refused.
func ExampleLimiter_Require() {
	limiter, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "api", Limit: 100, Window: time.Minute},
		policy.Rule{Name: "login", Limit: 5, Window: 15 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	release, err := limiter.Require("the login handler", "login")
	if err != nil {
		log.Fatal(err)
	}
	err = limiter.SetRules(policy.Rule{Name: "api", Limit: 200, Window: time.Minute})
	fmt.Println(errors.Is(err, sluice.ErrRuleInUse))
	release()
	err = limiter.SetRules(policy.Rule{Name: "api", Limit: 200, Window: time.Minute})
	fmt.Println(err)
	// Output:
	// true
	// <nil>
}

// Window gives the window in force of a rule, as the rules are now, which
// middleware tells clients.
func ExampleLimiter_Window() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "login", Limit: 5, Window: 15 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	w, ok := limiter.Window("login")
	fmt.Println(w, ok)
	_, ok = limiter.Window("nope")
	fmt.Println(ok)
	// Output:
	// 15m0s true
	// false
}
