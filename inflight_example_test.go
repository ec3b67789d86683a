package sluice_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// An InFlight rule limits the requests in progress per key: here two
// uploads per user at once. Release the slot in a defer, on every path.
func ExampleLimiter_Acquire() {
	limiter, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "uploads", Limit: 2, InFlight: true},
	)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	upload := func(user string) (release func()) {
		slot, d, err := limiter.Acquire(context.Background(), "uploads", user)
		switch {
		case err != nil:
			fmt.Println("error:", err)
		case !d.Allowed:
			fmt.Println(user, "denied: 2 uploads in progress") // answer 429
		default:
			fmt.Println(user, "admitted, slots left:", d.Remaining)
		}
		return slot.Release // the zero Slot of a denial releases nothing
	}
	first := upload("alice")
	second := upload("alice")
	upload("alice")
	upload("bob")
	first()
	first() // a second release does nothing
	upload("alice")
	second()
	// Output:
	// alice admitted, slots left: 1
	// alice admitted, slots left: 0
	// alice denied: 2 uploads in progress
	// bob admitted, slots left: 1
	// alice admitted, slots left: 0
}

// With a store, an InFlight rule holds at most Limit slots per key across
// the fleet: each Acquire takes a lease in Redis, which the limiter renews
// while the slot is held. The slots of an instance that dies come back when
// their lease lapses.
func ExampleLimiter_Acquire_fleet() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	limiter, err := sluice.New(sluice.Options{Redis: rdb},
		policy.Rule{Name: "reports", Limit: 20, InFlight: true}, // 20 report builds per tenant, fleet-wide
	)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	slot, d, err := limiter.Acquire(context.Background(), "reports", "tenant-42")
	if err != nil || !d.Allowed {
		return // busy (or the store failed under FailClosed): try later
	}
	defer slot.Release()
	// ... build the report ...
}
