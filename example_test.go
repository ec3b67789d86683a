package sluice_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// A limiter for a fleet: every instance runs the same code against the same
// Redis. Checks are local; the fleet over-admits at most 1% of each limit.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	limiter, err := sluice.New(sluice.Options{
		Redis:        rdb,
		SyncInterval: 100 * time.Millisecond,
		ErrorBudget:  0.01,
	},
		policy.Rule{Name: "api", Limit: 1000, Window: time.Minute},
		policy.Rule{Name: "login", Limit: 5, Window: 15 * time.Minute, Mode: policy.Strict},
	)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
}

// Without a store a limiter limits within this process.
func ExampleNew_local() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "api", Limit: 3, Window: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	fmt.Println(limiter.Stats().Keys)
	// Output: 0
}

// New says what is wrong with a configuration, and how to fix it.
func ExampleNew_invalid() {
	_, err := sluice.New(sluice.Options{ErrorBudget: 2}, policy.Rule{Name: "api", Limit: 10, Window: time.Second})
	fmt.Println(err)
	_, err = sluice.New(sluice.Options{}, policy.Rule{Name: "api:v1", Limit: 10, Window: time.Second})
	fmt.Println(err)
	// Output:
	// sluice: invalid options: ErrorBudget 2: it must be in (0, 1], a fraction of each rule's Limit (0 means 0.01)
	// invalid rule "api:v1": Name has ':' at byte 3; use only letters, digits, '_', '.' and '-'
}

func ExampleLimiter_Allow() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "api", Limit: 3, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		d, err := limiter.Allow(ctx, "api", "203.0.113.7")
		if err != nil {
			log.Fatal(err) // the check could not be made
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter > 0)
	}
	// Output:
	// true 2 false
	// true 1 false
	// true 0 false
	// false 0 true
}

// AllowN checks a cost larger than one, for limits in units other than
// requests.
func ExampleLimiter_AllowN() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "upload-kib", Limit: 1024, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	d, _ := limiter.AllowN(context.Background(), "upload-kib", "tenant-42", 1000)
	fmt.Println(d.Allowed, d.Remaining)
	d, _ = limiter.AllowN(context.Background(), "upload-kib", "tenant-42", 100)
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// true 24
	// false 24
}

// Peek reads a key's state without counting: for headers on responses that
// were not limited.
func ExampleLimiter_Peek() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "api", Limit: 10, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	_, _ = limiter.Allow(context.Background(), "api", "k")
	d, _ := limiter.Peek("api", "k")
	fmt.Println(d.Limit, d.Remaining)
	// Output: 10 9
}

// Flush pushes everything pending now, for example before a deploy drains
// the instance; Close does it too.
func ExampleLimiter_Flush() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "api", Limit: 10, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(limiter.Flush(context.Background()))
	fmt.Println(limiter.Close())
	// Output:
	// <nil>
	// <nil>
}

// SetRules replaces the rules while checks run: a rule that keeps its
// geometry keeps its counts, and a new limit applies at once.
func ExampleLimiter_SetRules() {
	limiter, err := sluice.New(sluice.Options{}, policy.Rule{Name: "api", Limit: 3, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	ctx := context.Background()
	for range 3 {
		_, _ = limiter.Allow(ctx, "api", "alice")
	}
	d, _ := limiter.Allow(ctx, "api", "alice")
	fmt.Println(d.Allowed, d.Remaining)

	err = limiter.SetRules(
		policy.Rule{Name: "api", Limit: 5, Window: time.Minute},
		policy.Rule{Name: "search", Limit: 1, Window: time.Second},
	)
	fmt.Println(err)
	d, _ = limiter.Allow(ctx, "api", "alice")
	fmt.Println(d.Allowed, d.Remaining) // 3 counted before, 1 now: 1 left of 5

	err = limiter.SetRules(policy.Rule{Name: "api", Limit: 0, Window: time.Minute})
	fmt.Println(err)
	// Output:
	// false 0
	// <nil>
	// true 1
	// invalid rule "api": Limit 0 is out of range: it must be between 1 and 4294967295
}

// WatchFile applies a configuration file and follows its changes; a file
// that does not load keeps the rules in force.
func ExampleLimiter_WatchFile() {
	dir, err := os.MkdirTemp("", "sluice")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - {name: api, limit: 100, window: 1m}\n"), 0o600); err != nil {
		log.Fatal(err)
	}
	cfg, err := policy.LoadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := sluice.New(sluice.Options{}, cfg.Rules...)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = limiter.WatchFile(ctx, path, sluice.WatchOptions{Interval: time.Second})
	fmt.Println(err)
	d, _ := limiter.Peek("api", "alice")
	fmt.Println(d.Limit)
	// Output:
	// <nil>
	// 100
}
