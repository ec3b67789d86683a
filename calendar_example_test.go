package sluice_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// stoppedClock is a clock that stays where it is set (Options.Clock).
type stoppedClock struct{ ns atomic.Int64 }

func (c *stoppedClock) Now() time.Time  { return time.Unix(0, c.ns.Load()) }
func (c *stoppedClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// A calendar quota: 3 exports per calendar day in New York, the day
// counted from local midnight to local midnight. On the day clocks spring
// forward the day has 23 hours; a denial at 8 p.m. says to retry at
// midnight, 4 hours later, and the next day starts whole.
func Example_calendarQuota() {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		log.Fatal(err)
	}
	clock := &stoppedClock{}
	clock.set(time.Date(2026, 3, 8, 20, 0, 0, 0, ny))
	limiter, err := sluice.New(sluice.Options{Clock: clock}, policy.Rule{
		Name: "exports", Limit: 3, Algorithm: policy.FixedWindow,
		Period: policy.Day, TimeZone: "America/New_York",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	ctx := context.Background()
	for range 4 {
		d, _ := limiter.Allow(ctx, "exports", "acme")
		fmt.Println(d.Allowed, d.Remaining, d.ResetAfter, d.RetryAfter)
	}
	clock.set(time.Date(2026, 3, 9, 0, 0, 0, 0, ny))
	d, _ := limiter.Allow(ctx, "exports", "acme")
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	// Output:
	// true 2 4h0m0s 0s
	// true 1 4h0m0s 0s
	// true 0 4h0m0s 0s
	// false 0 4h0m0s 4h0m0s
	// true 2 24h0m0s
}
