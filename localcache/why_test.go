package localcache

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// TestWhy: why a check whose key has no local allowance left waits for the
// store, from the key's state: never synced, a lease of an earlier bucket,
// a lease of this one used up, history without a lease, or a window at 0.9·L
// or more (whatever its lease).
func TestWhy(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 6)
	const limit, capv = 100, 3
	t0 := bucketStart(geo, 0)
	t1 := bucketStart(geo, 1)
	// leased uses key k's cap at t0, grants it a lease of units there
	// (none for 0), and uses that up too.
	leased := func(t *testing.T, tb *Table, s *fakeStore, units int64) {
		admitUntil(t, tb, "k", t0, 100)
		r, _ := tb.ref("k")
		if units > 0 {
			grant(tb, geo, s, r, t0, units)
		} else {
			syncRef(tb, geo, s, r, t0)
		}
		admitUntil(t, tb, "k", t0, 100)
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, tb *Table, s *fakeStore) int64 // returns the time of the check
		want  syncport.Why
	}{
		{"never synced: the cap used at once", func(t *testing.T, tb *Table, s *fakeStore) int64 {
			admitUntil(t, tb, "k", t0, 100)
			return t0
		}, syncport.WhyNew},
		{"history, no lease", func(t *testing.T, tb *Table, s *fakeStore) int64 {
			leased(t, tb, s, 0)
			return t0
		}, syncport.WhyCap},
		{"a lease of this bucket used up", func(t *testing.T, tb *Table, s *fakeStore) int64 {
			leased(t, tb, s, 10)
			return t0
		}, syncport.WhyLease},
		{"a lease of the bucket before", func(t *testing.T, tb *Table, s *fakeStore) int64 {
			leased(t, tb, s, 10)
			tb.tick(t1)
			admitUntil(t, tb, "k", t1, 100)
			return t1
		}, syncport.WhyStart},
		{"the window at 0.9·L, a lease of this bucket", func(t *testing.T, tb *Table, s *fakeStore) int64 {
			s.add("k", geo.Index(t0), 80)
			leased(t, tb, s, 5)
			return t0
		}, syncport.WhyNear},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb := mkTable(t, geo, limit, true)
			tb.setLimits(tableport.Limits{Cap: capv, Share: limit, Mode: policy.FailLocal})
			tb.tick(t0)
			now := tc.setup(t, tb, newFakeStore())
			require.Equal(t, verdict.OverCap, tb.AllowAt("k", now, 1).Status, "harness: the key has no allowance left")
			r, ok := tb.ref("k")
			require.True(t, ok)
			assert.Equal(t, tc.want, tb.why(r, now, 1))
		})
	}
	t.Run("a key without an entry (nil Ref)", func(t *testing.T) {
		t.Parallel()
		tb := mkTable(t, geo, limit, true)
		assert.Equal(t, syncport.WhyNew, tb.why(nil, t0, 1))
	})
}
