package localcache_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/window"
)

// A Local table counts one rule's keys in this process: a sliding window of
// one minute in six sub-windows, 3 a minute. Times are passed in (AllowAt),
// as nanoseconds on the table's clock.
func ExampleNew() {
	tb, err := localcache.New(localcache.Config{
		Geometry: window.NewWeighted(time.Minute, 6),
		Limit:    3,
		Keys:     localcache.NewKeys(1000),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range 4 {
		v := tb.AllowAt("alice", start+int64(i)*int64(time.Second), 1)
		fmt.Println(v.Status, v.Remaining)
	}
	// A minute later the window has slid past those admissions.
	v := tb.AllowAt("alice", start+int64(70*time.Second), 1)
	fmt.Println(v.Status, v.Remaining)
	// Output:
	// allowed 2
	// allowed 1
	// allowed 0
	// over-limit 0
	// allowed 2
}

// An Eventual table keeps what this instance admitted pending for the
// syncer, and admits locally only within the divergence cap: past it, the
// check answers OverCap, and the caller hands it to the store. Pending, of
// the table as the syncer sees it (SyncKeys), is what the syncer would push.
func ExampleTable_SyncKeys() {
	tb, err := localcache.New(localcache.Config{
		Geometry: window.NewFixed(time.Minute),
		Limit:    100,
		Eventual: true,
		Keys:     localcache.NewKeys(1000),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	tb.Control().SetLimits(tableport.Limits{Cap: 2})
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC).UnixNano()
	for range 3 {
		fmt.Println(tb.AllowAt("bob", now, 1).Status)
	}
	r, _ := tb.Control().Ref("bob")
	for _, b := range tb.SyncKeys().Pending(r, now, nil) {
		fmt.Println("pending:", b.Count)
	}
	// Output:
	// allowed
	// allowed
	// over-cap
	// pending: 2
}
