package syncer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestSyncScriptLease: a call that asks for a lease is granted, with its
// newest batch, the units it wants up to floor((room − L/10) / (N̂+1)) after
// its reservations, counted at once in the current bucket and recorded with the
// batch; a resend grants nothing new and returns the recorded grant; a call
// that does not ask, or whose batch is not new, gets none.
func TestSyncScriptLease(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	nowUs := storeTimeUs(t, c)
	const k = 1000
	sub := midSubUs(nowUs, k)
	cases := []struct {
		name   string
		lease  int64 // N̂, 0: no lease asked
		want   int64
		deltas [][2]int64
		costs  []int64
		grant  int64
		totals []int64 // span 2: the oldest bucket, then the current one
	}{
		// floor((room − L/10) / (N̂+1)), L = 100.
		{"a share of the room", 3, 1000, nil, nil, 22, []int64{0, 22}},
		{"no more than wanted", 3, 10, nil, nil, 10, []int64{0, 10}},
		{"after the reservations", 1, 1000, [][2]int64{{k, 40}}, []int64{20}, 15, []int64{0, 75}},
		{"the oldest bucket counts whole", 1, 1000, [][2]int64{{k - 1, 60}}, nil, 15, []int64{60, 15}},
		{"just above the last tenth", 3, 1000, [][2]int64{{k, 86}}, nil, 1, []int64{0, 87}},
		{"never the last tenth", 3, 1000, [][2]int64{{k, 90}}, nil, 0, []int64{0, 90}},
		{"at the limit: none", 3, 1000, [][2]int64{{k, 100}}, nil, 0, []int64{0, 100}},
		{"not asked: none", 0, 1000, [][2]int64{{k, 5}}, nil, 0, []int64{0, 5}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := "lease:" + itoa(int64(i))
			r := scriptRule{sub: sub, span: 2, limit: 100, ttl: 60_000, inst: "a", exact: true, lease: tc.lease, want: tc.want}
			seq := itoa(nowUs + int64(i))
			got := runSync(t, c, key, r, sbatch{seq: seq, deltas: tc.deltas, costs: tc.costs})
			require.InDelta(t, 0.5, got.phase(sub, 2), 0.01, "harness: the call is mid-bucket")
			assert.Equal(t, tc.grant, got.grant)
			assert.Equal(t, tc.totals, got.totals, "the grant counts in the current bucket")
			assert.Equal(t, tc.totals[0]+tc.totals[1], total(t, c, key), "and in the hash")

			again := runSync(t, c, key, r, sbatch{seq: seq, deltas: tc.deltas})
			assert.Zero(t, again.grant, "a resend grants nothing new")
			assert.Equal(t, tc.totals, again.totals, "nor counts anything twice")
			if tc.grant > 0 || len(tc.costs) > 0 {
				require.Equal(t, []int64{1}, again.status)
				assert.Regexp(t, `^[01]*:`+itoa(k)+`:`+itoa(tc.grant)+`$`, again.bits[0], "the recorded grant comes back")
			}
		})
	}
	t.Run("a call without a new batch gets none", func(t *testing.T) {
		t.Parallel()
		r := scriptRule{sub: sub, span: 2, limit: 100, ttl: 60_000, inst: "a", exact: true, lease: 3, want: 1000}
		got := runSync(t, c, "lease:nobatch", r)
		assert.Zero(t, got.grant)
		assert.Equal(t, []int64{0, 0}, got.totals)
	})
}
