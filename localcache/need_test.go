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

// TestNeed: a key needs a sync once its unacknowledged count reaches its cap
// or once the window as this instance sees it holds half of the limit; a key
// far from both waits, and Unsynced finds it while it has counts in the
// window; a table on its failure mode syncs every key.
func TestNeed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		capv     int64
		admit    int64 // admissions at t0
		fleet    int64 // the fleet's total pulled for the bucket before
		lease    int64 // units leased at t0 (admitted first)
		down     bool
		sync     bool
		unsynced bool // Unsynced lists it
	}{
		{"nothing at all", 4, 0, 0, 0, false, false, false},
		{"below its cap, far from the limit", 4, 3, 0, 0, false, false, true},
		{"at its cap", 4, 4, 0, 0, false, true, true},
		{"cap 0: any count", 0, 0, 0, 0, false, false, false},
		{"near the limit: half of it in view", 4, 1, 49, 0, false, true, true},
		{"just below half", 4, 1, 48, 0, false, false, true},
		{"leased units do not count against the cap", 4, 9, 0, 6, false, false, true},
		{"the store down: every key", 4, 1, 0, 0, true, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			geo := window.NewSliding(time.Minute, 6)
			tb := mkTable(t, geo, 100, true)
			tb.setLimits(tableport.Limits{Cap: tc.capv, Share: 100, Mode: policy.FailLocal})
			t0 := bucketStart(geo, 0)
			tb.tick(t0)
			r, ok := tb.ref("k")
			require.True(t, ok)
			k := geo.Index(t0)
			tb.syncView().Settle(r, t0, nil, k-1, []int64{tc.fleet, tc.lease}, Bucket{Index: k, Count: tc.lease})
			for i := int64(0); i < tc.admit; i++ {
				require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
			}
			if tc.down {
				tb.setLimits(tableport.Limits{Cap: tc.capv, Share: 100, Mode: policy.FailLocal, Down: true})
			}
			assert.Equal(t, tc.sync, tb.syncView().Need(r, t0), "sync")
			assert.Equal(t, tc.unsynced, len(tb.syncView().Unsynced(nil, t0)) == 1, "unsynced")
		})
	}
	t.Run("counts that left the window", func(t *testing.T) {
		t.Parallel()
		geo := window.NewSliding(time.Minute, 6)
		tb := mkTable(t, geo, 100, true)
		tb.setLimits(tableport.Limits{Cap: 4, Share: 100, Mode: policy.FailLocal})
		t0 := bucketStart(geo, 0)
		require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
		r, _ := tb.ref("k")
		later := t0 + int64(geo.Window()) + geo.Sub()
		assert.False(t, tb.syncView().Need(r, later))
		assert.Empty(t, tb.syncView().Unsynced(nil, later), "nothing left to push")
		assert.Len(t, tb.syncView().Unsynced(nil, t0), 1)
	})
}

// TestPark: a parked key is off the dirty tracking: its quiet admissions do
// not queue it; one that takes it to half of its allowance does, and so do
// MarkDirty and the store going down; a sweep turns a parked key gone idle
// clean, then removes it.
func TestPark(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		wake  func(tb *Table, r verdict.Ref, t0 int64)
		queue bool // Drain finds it after wake
	}{
		{"quiet admissions", func(tb *Table, _ verdict.Ref, t0 int64) {
			for range 3 {
				require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
			}
		}, false},
		{"half of the allowance", func(tb *Table, _ verdict.Ref, t0 int64) {
			for range 5 {
				require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
			}
		}, true},
		{"MarkDirty", func(tb *Table, r verdict.Ref, _ int64) { tb.syncView().MarkDirty(r) }, true},
		{"the store down", func(tb *Table, _ verdict.Ref, _ int64) {
			tb.setLimits(tableport.Limits{Cap: 10, Share: 100, Mode: policy.FailLocal, Down: true})
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb, r, t0 := parkedKey(t)
			tc.wake(tb, r, t0)
			assert.Equal(t, tc.queue, len(tb.syncView().Drain(nil)) == 1, "queued")
			assert.Len(t, tb.syncView().Unsynced(nil, t0), 1, "a flush finds it either way")
		})
	}
	t.Run("swept once idle", func(t *testing.T) {
		t.Parallel()
		tb, _, t0 := parkedKey(t)
		geo := tb.geo
		assert.Zero(t, tb.Sweep(t0), "not idle")
		later := bucketStart(geo, int64(geo.Span())+1)
		assert.Zero(t, tb.Sweep(later), "idle: clean, then dead")
		assert.Zero(t, tb.Sweep(later))
		assert.Equal(t, 1, tb.Sweep(later), "then gone")
		assert.Zero(t, tb.size())
	})
}

// parkedKey returns an Eventual table (limit 100, cap 10) whose key "k" was
// admitted once at t0, drained, found in no need of a sync and parked.
func parkedKey(t *testing.T) (*Table, verdict.Ref, int64) {
	t.Helper()
	geo := window.NewSliding(time.Minute, 6)
	tb := mkTable(t, geo, 100, true)
	tb.setLimits(tableport.Limits{Cap: 10, Share: 100, Mode: policy.FailLocal})
	t0 := bucketStart(geo, 0)
	tb.tick(t0)
	require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
	r, _ := tb.ref("k")
	tb.syncView().MarkDirty(r) // a new key is born parked (TestBornParked): queue it
	refs := tb.syncView().Drain(nil)
	require.Len(t, refs, 1)
	require.False(t, tb.syncView().Need(refs[0], t0))
	tb.syncView().Park(refs[0])
	return tb, refs[0], t0
}

// TestBornParked: a new key of a healthy Eventual table starts parked, so
// that its first admission does not queue it; the rules that unpark a
// parked key apply from its first admission (half of its allowance here),
// and a flush finds its counts. A key created while the store is down is
// not parked: every key is then queued.
func TestBornParked(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 6)
	t0 := bucketStart(geo, 0)
	tb := mkTable(t, geo, 100, true)
	tb.setLimits(tableport.Limits{Cap: 10, Share: 100, Mode: policy.FailLocal})
	require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
	assert.Empty(t, tb.syncView().Drain(nil), "its first admission does not queue it")
	assert.Len(t, tb.syncView().Unsynced(nil, t0), 1, "a flush finds it")
	for range 4 {
		require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
	}
	assert.Len(t, tb.syncView().Drain(nil), 1, "half of its allowance queues it")

	// The race Park closes: an entry inserted while the table was healthy
	// (added saw it so), parked after unparkAll walked the map.
	late := tb.newEntry("late")
	_, inserted := tb.m.LoadOrInsert("late", func() *hdr { return late })
	require.True(t, inserted)
	tb.setLimits(tableport.Limits{Cap: 10, Share: 100, Mode: policy.FailLocal, Down: true})
	tb.syncView().Park(late)
	assert.Equal(t, []string{"late"}, drainKeys(tb), "parked by a table that left its healthy state: queued")

	require.Equal(t, verdict.Allowed, tb.AllowAt("down", t0, 1).Status)
	assert.Equal(t, []string{"down"}, drainKeys(tb), "the store down: a new key is queued")

	// A table whose syncer takes every key it drains (a Strict rule's)
	// queues a new key on its first admission.
	strict := mustTable(t, Config{Geometry: geo, Limit: 100, Eventual: true, Keys: NewKeys(100)})
	strict.setLimits(tableport.Limits{Cap: 10, Share: 100, Mode: policy.FailLocal})
	require.Equal(t, verdict.Allowed, strict.AllowAt("k", t0, 1).Status)
	assert.Equal(t, []string{"k"}, drainKeys(strict), "not synced by need: queued")
}
