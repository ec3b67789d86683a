package syncer

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/window"
)

// Each rule's keys live under the prefix, in a Redis Cluster hash tag of the
// rule and the key, with the sub-window length in microseconds last. New
// does not reach the store: Start registers the instance and starts the
// background loop, Flush pushes every pending count at once, and Close
// flushes and leaves the registry (the limiter of package sluice drives all
// three).
func Example_keyName() {
	geo := window.NewWeighted(time.Second, 10)
	tb, err := localcache.New(localcache.Config{Geometry: geo, Limit: 1000, Eventual: true, ByNeed: true, Keys: localcache.NewKeys(1000)})
	if err != nil {
		fmt.Println(err)
		return
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer c.Close()
	s, err := New(Config{
		Client:     c,
		Prefix:     "sluice",
		InstanceID: "web-1",
		Interval:   100 * time.Millisecond,
		Timeout:    50 * time.Millisecond,
	}, syncport.RuleConfig{Name: "api", Geometry: geo, Limit: 1000, Keys: tb.SyncKeys(), Leases: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s.rule("api").keyName("user:42"))
	// Output:
	// sluice:{api:user%3A42}:100000
}
