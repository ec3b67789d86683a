package layer_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/layer"
	"github.com/sluicehq/sluice/policy"
)

// A transport decides as httplimit's middleware does with a RuleSet: the rules checked together, all or none, and the fields that
// tell the client about them.
func ExampleRuleSet() {
	limiter, err := sluice.New(sluice.Options{},
		policy.Rule{Name: "per-client", Limit: 2, Window: time.Minute},
		policy.Rule{Name: "per-tenant", Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	rs, err := layer.NewRuleSet(limiter, "per-client", "per-tenant")
	if err != nil {
		log.Fatal(err)
	}
	keys := []string{"198.51.100.7", "acme"} // one per rule, in order
	for range 3 {
		res, err := rs.Check(context.Background(), keys, 1, layer.FieldRateLimit)
		if err != nil {
			log.Fatal(err) // the check could not be made
		}
		for i, name := range layer.FieldNames {
			// Ratelimit: "per-client";r=1;t=…, "per-tenant";r=99;t=…
			if v := res.Values.Field(i); v != "" {
				_, _ = name, v // send v under name, as the transport's header
			}
		}
		if res.Denied >= 0 {
			fmt.Println("denied by", rs.Name(res.Denied))
			continue
		}
		fmt.Println("allowed, remaining", res.Decision.Remaining)
	}
	// Output:
	// allowed, remaining 1
	// allowed, remaining 0
	// denied by per-client
}
