package sluice_test

import (
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// Rule describes a rule without checking anything, for headers such as
// RateLimit-Policy.
func ExampleLimiter_Rule() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "api", Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	r, ok := limiter.Rule("api")
	fmt.Println(ok, r.Limit, r.Window, r.Mode)
	_, ok = limiter.Rule("nope")
	fmt.Println(ok)
	// Output:
	// true 100 1m0s local
	// false
}

// MaxKeyLength bounds the keys a front door may pass to the limiter.
func ExampleLimiter_MaxKeyLength() {
	limiter, err := sluice.New(sluice.Options{MaxKeyLength: 64}, policy.Rule{Name: "api", Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	fmt.Println(limiter.MaxKeyLength())
	// Output: 64
}
