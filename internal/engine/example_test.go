package engine_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
)

// An engine decides the checks of one rule; the limiter only finds it and
// adds the rule's Limit to its Result.
func ExampleNew() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	rule := policy.Rule{Name: "login", Limit: 2, Window: time.Minute, Algorithm: policy.FixedWindow, Mode: policy.Local}
	eng, err := engine.New(engine.Config{
		Rule: rule,
		Keys: localcache.NewKeys(1000),
		Now:  func() int64 { return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := 0; i < 3; i++ {
		res, _ := eng.Check(context.Background(), "alice", 1)
		fmt.Printf("allowed=%v remaining=%d retry=%v\n", res.Allowed, res.Remaining, res.RetryAfter)
	}
	// Output:
	// allowed=true remaining=1 retry=0s
	// allowed=true remaining=0 retry=0s
	// allowed=false remaining=0 retry=1m0s
}
