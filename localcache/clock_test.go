package localcache

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// TestSettlePublishesTheStoresBucket: a store's answer that comes back in a
// later bucket than the published time (a ticker held back less than
// staleAfter) publishes its time, so the checks that follow, on the cap the
// answer refreshed, are counted in the bucket the store is in, not in the
// one it left; an answer in the same bucket, or an older one, leaves the
// published time alone.
func TestSettlePublishesTheStoresBucket(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Second, 10)
	t0 := bucketStart(geo, 0) + 95*int64(time.Millisecond) // late in bucket k
	k := geo.Index(t0)
	cases := []struct {
		name   string
		answer int64 // the syncer's time at the answer
		want   int64 // the published time after it
		bucket int64 // the bucket the next check counts in
	}{
		{"answer in the next bucket", t0 + 6*int64(time.Millisecond), t0 + 6*int64(time.Millisecond), k + 1},
		{"answer later in the same bucket", t0 + 4*int64(time.Millisecond), t0, k},
		{"answer dated before the published time", t0 - int64(time.Millisecond), t0, k},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb := mkTable(t, geo, 1000, true)
			tb.setLimits(tableport.Limits{Cap: 2, Share: 250, Mode: policy.FailLocal})
			tb.tick(t0)
			require.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status)
			r, ok := tb.ref("k")
			require.True(t, ok)
			tb.syncView().Settle(r, tc.answer, []Bucket{{Index: k, Count: 1}}, k, []int64{1}, Bucket{})
			assert.Equal(t, tc.want, tb.Now(), "published time")
			require.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status)
			assert.Equal(t, []Bucket{{Index: tc.bucket, Count: 1}}, tb.syncView().Pending(r, max(tc.answer, t0), nil))
		})
	}
}
