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

// Layered limits: 3 per second and 5 per hour for the same user, and 100
// per second for the client's IP. A request is counted against all three
// or none: the requests the per-second rule denies use up nothing of the
// hourly one.
func ExampleLimiter_AllowAll() {
	limiter, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "user-second", Limit: 3, Window: time.Second},
		policy.Rule{Name: "user-hour", Limit: 5, Window: time.Hour},
		policy.Rule{Name: "ip", Limit: 100, Window: time.Second},
	)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	ctx := context.Background()
	for range 4 {
		d, err := limiter.AllowAll(ctx, 1,
			sluice.Check{Rule: "user-second", Key: "alice"},
			sluice.Check{Rule: "user-hour", Key: "alice"},
			sluice.Check{Rule: "ip", Key: "203.0.113.7"},
		)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(d.Allowed, d.Limit, d.Remaining)
	}
	hour, _ := limiter.Peek("user-hour", "alice")
	fmt.Println("hourly left:", hour.Remaining)
	// Output:
	// true 3 2
	// true 3 1
	// true 3 0
	// false 3 0
	// hourly left: 2
}

// Soft throttling lets 20% past the limit through; the Decision still
// speaks of the Limit: a request in the soft band is allowed with nothing
// remaining.
func ExampleLimiter_AllowN_soft() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "api", Limit: 5, Window: time.Minute, Soft: 0.2})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	for range 7 {
		d, _ := limiter.Allow(context.Background(), "api", "k")
		fmt.Println(d.Allowed, d.Limit, d.Remaining)
	}
	// Output:
	// true 5 4
	// true 5 3
	// true 5 2
	// true 5 1
	// true 5 0
	// true 5 0
	// false 5 0
}

// A shadow rule decides and counts as usual but never denies: what it
// would have denied is allowed and Shadowed, with the RetryAfter it would
// have given. Roll a new limit out in shadow, watch, then enforce.
func ExampleDecision_Shadowed() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "new-limit", Limit: 2, Window: time.Minute, Shadow: true})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	for range 3 {
		d, _ := limiter.Allow(context.Background(), "new-limit", "k")
		fmt.Println(d.Allowed, d.Shadowed())
	}
	// Output:
	// true false
	// true false
	// true true
}

// Wait queues a request instead of denying it: the leaky bucket as a
// queue. Here a bucket of 100 per second that holds 1 spaces the requests
// 10ms apart; a context whose deadline comes before the next admission is
// refused at once.
func ExampleLimiter_Wait() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "jobs", Limit: 100, Window: time.Second, Algorithm: policy.GCRA, Burst: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	ctx := context.Background()
	start := time.Now()
	for range 5 {
		if err := limiter.Wait(ctx, "jobs", "queue"); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("5 admitted, at least 40ms:", time.Since(start) >= 40*time.Millisecond)
	short, cancel := context.WithTimeout(ctx, time.Microsecond)
	defer cancel()
	err = limiter.Wait(short, "jobs", "queue")
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output:
	// 5 admitted, at least 40ms: true
	// true
}
