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

// grant does what the syncer does with a lease: it pushes key's pending
// counts, adds the grant to the store's current bucket, and settles.
func grant(tb *Table, geo window.Sliding, s *fakeStore, r verdict.Ref, now, units int64) {
	pend := tb.syncView().Pending(r, now, nil)
	k := geo.Index(now)
	s.add(tb.syncView().Key(r), k, units)
	first := oldest(geo, k)
	totals := s.push(tb.syncView().Key(r), pend, first, geo.Span())
	tb.syncView().Settle(r, now, pend, first, totals, Bucket{Index: k, Count: units})
}

// TestLease: a lease raises the bucket's budget past the cap by its units;
// the units it covers are neither pushed nor counted twice; Release waits for
// the bucket to end (unless forced), then returns what was not used and
// drops the covered units from pend, so that the store's counts plus the
// pushed ones are exactly what was admitted.
func TestLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		admit   int64 // checks of cost 1 after the grant, in its bucket
		covered int64
	}{
		{"partly used", 4, 4},
		{"used up and past it, to the cap", 13, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			geo := window.NewSliding(time.Minute, 6)
			tb := mkTable(t, geo, 100, true)
			tb.setLimits(tableport.Limits{Cap: 3, Share: 100, Mode: policy.FailLocal})
			s := newFakeStore()
			t0 := bucketStart(geo, 0)
			tb.tick(t0)
			got, v := admitUntil(t, tb, "k", t0, 100)
			require.Equal(t, int64(3), got, "the cap")
			require.Equal(t, verdict.OverCap, v.Status)
			r, ok := tb.ref("k")
			require.True(t, ok)

			grant(tb, geo, s, r, t0, 10)
			assert.Zero(t, pendingSum(tb, r, t0), "pushed with the grant")
			est, own, _ := tb.estimate("k", t0)
			assert.InDelta(t, 13, est, 1e-9, "3 admitted and 10 leased, once each")
			assert.Zero(t, own)
			assert.Equal(t, int64(97), tb.room("k", t0), "the lease's units are this instance's room")

			admitted := int64(0)
			for range tc.admit {
				require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0+1, 1).Status, "within the lease and the cap")
				admitted++
			}
			if tc.admit == 13 {
				assert.Equal(t, verdict.OverCap, tb.AllowAt("k", t0+1, 1).Status, "lease used up, cap reached")
			}
			assert.Equal(t, 97-admitted, tb.room("k", t0+1), "what a check would see")
			est, own, _ = tb.estimate("k", t0+1)
			assert.InDelta(t, float64(13+admitted-tc.covered), est, 1e-9, "covered units are in the store's count already")
			assert.Equal(t, admitted-tc.covered, own, "only uncovered units are unacknowledged")
			assert.Equal(t, admitted-tc.covered, pendingSum(tb, r, t0+1), "only uncovered units are pushed")

			_, done := tb.syncView().Release(r, geo.Index(t0), t0+1, false)
			assert.False(t, done, "the bucket is not over")
			t1 := bucketStart(geo, 1)
			tb.tick(t1)
			unused, done := tb.syncView().Release(r, geo.Index(t0), t1, false)
			require.True(t, done)
			assert.Equal(t, 10-tc.covered, unused)
			_, done = tb.syncView().Release(r, geo.Index(t0), t1, false)
			assert.True(t, done, "nothing left to end")

			// The store: the grant less what is given back, plus the
			// pushed counts, is exactly what was admitted.
			s.add("k", geo.Index(t0), -unused)
			syncRef(tb, geo, s, r, t1)
			var inStore int64
			for _, n := range s.counts["k"] {
				inStore += n
			}
			assert.Equal(t, 3+admitted, inStore)
			assert.Zero(t, pendingSum(tb, r, t1))
		})
	}
}

// leasedKey returns an Eventual table of limit with divergence cap capv,
// its store, the time t0 at the start of a bucket (published), and the
// entry of key "k" after one admission at t0.
func leasedKey(t *testing.T, limit, capv int64) (*Table, window.Sliding, *fakeStore, int64, verdict.Ref) {
	t.Helper()
	geo := window.NewSliding(time.Minute, 6)
	tb := mkTable(t, geo, limit, true)
	tb.setLimits(tableport.Limits{Cap: capv, Share: limit, Mode: policy.FailLocal})
	t0 := bucketStart(geo, 0)
	tb.tick(t0)
	require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
	r, ok := tb.ref("k")
	require.True(t, ok)
	return tb, geo, newFakeStore(), t0, r
}

// TestLeaseForcedRelease: a forced release ends a lease whose bucket is
// still current, and the budget no longer includes it.
func TestLeaseForcedRelease(t *testing.T) {
	t.Parallel()
	tb, geo, s, t0, r := leasedKey(t, 100, 2)
	grant(tb, geo, s, r, t0, 5)
	require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
	unused, done := tb.syncView().Release(r, geo.Index(t0), t0, true)
	require.True(t, done)
	assert.Equal(t, int64(4), unused)
	got, v := admitUntil(t, tb, "k", t0, 100)
	assert.Equal(t, int64(2), got, "the cap alone")
	assert.Equal(t, verdict.OverCap, v.Status)
}

// TestReleaseRacingCheck: a fast-path check that read its bucket's position
// before Release ended the bucket's lease, and adds to the pend word after
// it, is held to the budget Release stored, not to the one that still held
// the lease: Release lowered pend by the covered units and gave the unused
// ones back, and on the old budget the check would take the key's uncovered
// count past its cap, beyond what the store counts. With nothing in between
// the check is admitted.
func TestReleaseRacingCheck(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		admit    int // before the racing check: 5 on the lease, then the cap's
		release  bool
		force    bool
		admitted bool
	}{
		{"no release in between", 6, false, false, true},
		{"release once the bucket is over", 7, true, false, false},
		{"forced release in the bucket (Flush, Close)", 7, true, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb, geo, s, t0, r := leasedKey(t, 100, 2)
			grant(tb, geo, s, r, t0, 5)
			for range tc.admit {
				require.Equal(t, verdict.Allowed, tb.Allow("k", 1).Status)
			}
			// The racing check: its position and the budget it would have
			// held to, read before the release.
			e, k := entryOf(r), geo.Index(t0)
			p := tb.pos.Load()
			tag, off := int64(p>>24)&tagMask, uintptr(p>>48)
			before := countOf(e.budget.Load())
			if tc.release {
				now := t0
				if !tc.force {
					now = t0 + geo.Sub()
					tb.tick(now)
				}
				unused, done := tb.syncView().Release(r, k, now, tc.force)
				require.True(t, done)
				require.Equal(t, int64(0), unused, "the lease was used up")
				left := countAt(tb.pend(e, tb.slotOf(k)).Load(), k)
				require.Equal(t, int64(2), left, "the cap's units, uncovered")
				require.LessOrEqual(t, left+1, before, "the old budget would admit one more")
			}
			_, _, ok := tb.add(e, off, tag, 1)
			assert.Equal(t, tc.admitted, ok)
			if tc.release {
				assert.Equal(t, int64(2), countAt(tb.pend(e, tb.slotOf(k)).Load(), k), "uncovered: at most the cap")
			}
		})
	}
}

// TestReleaseUnusedRacingCheck: a lease none of which is used can end while
// its bucket is current (a lease given back early, Flush) without a check
// that read the pend word and the budget before the release admitting on
// the units given back: the release bumps the word's version, so the
// check's compare-and-swap fails and, trying again, it is held to the cap.
// Lowering the word by the units the lease covered, none, would leave it
// as the check read it.
func TestReleaseUnusedRacingCheck(t *testing.T) {
	t.Parallel()
	tb, geo, s, t0, r := leasedKey(t, 100, 2)
	t1 := t0 + geo.Sub()
	tb.tick(t1)
	grant(tb, geo, s, r, t1, 5)
	e, k := entryOf(r), geo.Index(t1)
	p := tb.pos.Load()
	tag, off := int64(p>>24)&tagMask, uintptr(p>>48)
	pw := tb.pend(e, tb.slotOf(k))
	w, bw := pw.Load(), e.budget.Load()
	require.Equal(t, int64(0), countAt(w, k), "nothing used in the lease's bucket")
	require.Equal(t, tag, tagOf(bw))
	require.GreaterOrEqual(t, countOf(bw), int64(5), "the budget the check read admits 5: the lease")
	unused, done := tb.syncView().Release(r, k, t1, true)
	require.True(t, done)
	require.Equal(t, int64(5), unused)
	assert.False(t, pw.CompareAndSwap(w, w+5), "the word the check read has changed")
	_, _, ok := tb.add(e, off, tag, 5)
	assert.False(t, ok, "tried again, the check is held to the cap")
	assert.Equal(t, int64(0), countAt(pw.Load(), k))
	_, _, ok = tb.add(e, off, tag, 2)
	assert.True(t, ok, "the cap's units")
}

// TestWant: a key asks for twice what it admitted in the bucket, its lease
// included, and at least twice its cap.
func TestWant(t *testing.T) {
	t.Parallel()
	tb, geo, s, t0, r := leasedKey(t, 1000, 4)
	assert.Equal(t, int64(8), tb.syncView().Want(r, t0, 0), "twice the cap")
	admitUntil(t, tb, "k", t0, 100)
	grant(tb, geo, s, r, t0, 8)
	admitUntil(t, tb, "k", t0, 100) // the lease and the cap again
	assert.Equal(t, int64(2*(8+4)), tb.syncView().Want(r, t0, 0), "doubling: the lease and the pending count")
}

// TestWantFollowsTheRate: at a bucket's start a key asks for its part of
// what the fleet admitted in the bucket before (its total times Share/Limit),
// when that is more than twice its cap.
func TestWantFollowsTheRate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		prev, share int64
		want        int64
	}{
		{"a quarter of the bucket before", 60, 250, 15},
		{"twice the cap when more", 8, 250, 8},
		{"a lone instance takes it all", 40, 1000, 40},
		// ⌊(⌊1000/10⌋ − 1)/(N̂+1)⌋
		{"never more than holdMost", 400, 250, 19},
		{"a lone instance's holdMost", 400, 1000, 49},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb, geo, _, t0, r := leasedKey(t, 1000, 4)
			tb.setLimits(tableport.Limits{Cap: 4, Share: tc.share, Mode: policy.FailLocal})
			t1 := t0 + geo.Sub()
			k := geo.Index(t1)
			tb.syncView().Settle(r, t1, nil, k-1, []int64{tc.prev, 0}, Bucket{})
			assert.Equal(t, tc.want, tb.syncView().Want(r, t1, 0))
		})
	}
}

// TestLeaseNext: a lease of the next bucket, granted while the current one
// is in use, leaves the current bucket's budget alone; once its bucket
// starts (before a sync has pulled that bucket's total) the key admits it on
// top of its cap, counts it once in the estimate, and pushes only what is
// past it; releasing the bucket before leaves it in place.
func TestLeaseNext(t *testing.T) {
	t.Parallel()
	tb, geo, s, t0, r := leasedKey(t, 1000, 2)
	k0 := geo.Index(t0)
	grant(tb, geo, s, r, t0, 5)
	s.add("k", k0+1, 6)
	tb.syncView().Settle(r, t0, nil, oldest(geo, k0), s.push("k", nil, oldest(geo, k0), geo.Span()), Bucket{Index: k0 + 1, Count: 6})
	got, v := admitUntil(t, tb, "k", t0, 100)
	assert.Equal(t, int64(5+2), got, "this bucket: its lease and the cap, not the next one's")
	assert.Equal(t, verdict.OverCap, v.Status)
	assert.Equal(t, int64(14), tb.syncView().NextWant(r, t0, 0), "7 admitted at the bucket's start: scaled from half a bucket")
	assert.Equal(t, int64(20), tb.syncView().NextWant(r, t0, 20), "or the most used in a bucket of the window, if more")

	t1 := bucketStart(geo, 1)
	tb.tick(t1)
	unused, done := tb.syncView().Release(r, k0, t1, false)
	require.True(t, done)
	assert.Zero(t, unused)
	est, own, _ := tb.estimate("k", t1)
	assert.InDelta(t, 1+5+2+6, est, 1e-9, "the next bucket's lease counted once, before any pull of it")
	assert.Equal(t, int64(2), own, "the 2 past the old lease, not pushed yet")

	got, v = admitUntil(t, tb, "k", t1, 100)
	assert.Equal(t, int64(6), got, "the new lease; the cap is taken by the 2 unacknowledged")
	assert.Equal(t, verdict.OverCap, v.Status)
	syncRef(tb, geo, s, r, t1) // acknowledges the 2: the cap is whole again
	got, _ = admitUntil(t, tb, "k", t1, 100)
	assert.Equal(t, int64(2), got, "the cap")
	assert.Equal(t, []Bucket{{Index: k0 + 1, Count: 2}}, tb.syncView().Pending(r, t1, nil), "only what is past the lease is pushed")
	assert.Zero(t, tb.syncView().NextWant(r, t1+geo.Sub(), 0), "nothing admitted in the bucket after, nothing used before")
	assert.Zero(t, tb.syncView().NextWant(r, t1+geo.Sub(), 20), "nothing admitted in the bucket: its traffic may have left, whatever its peak")
	assert.Equal(t, int64(20), tb.syncView().NextWant(r, t1, 20), "admitting: the most used in a bucket of the window")
}

// TestAheadFit: a bucket's need the cap serves without a lease ahead is
// twice the cap, and the cap alone when it is one unit (it serves one check).
func TestAheadFit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ capv, fit int64 }{{0, 0}, {1, 1}, {2, 4}, {5, 10}} {
		assert.Equal(t, tc.fit, aheadFit(tc.capv), "cap %d", tc.capv)
	}
	tb, geo, _, t0, r := leasedKey(t, 100, 1) // one unit admitted
	assert.Equal(t, int64(2), tb.syncView().NextWant(r, t0+geo.Sub()/2, 2), "a cap of 1: leased ahead for a need of 2")
}

// TestHoldMost: an instance holds at most ⌊(⌊L/10⌋ − 1)/(N̂+1)⌋ leased units
// unused, per key, and at least one: the fleet's unused units stay below the
// last tenth of the limit.
func TestHoldMost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ limit, share, want int64 }{
		{1000, 250, 19},  // four instances
		{1000, 125, 11},  // eight
		{1000, 1000, 49}, // one
		{1000, 0, 49},    // no share yet
		{100, 25, 1},     // ⌊9/5⌋
		{50, 12, 1},      // ⌊4/6⌋ = 0: one unit still
		{1_000_000, 250_000, 19_999},
	} {
		got := holdMost(tc.limit, tc.share)
		assert.Equal(t, tc.want, got, "limit %d share %d", tc.limit, tc.share)
		n := int64(1)
		if tc.share > 0 {
			n = tc.limit / tc.share
		}
		if got > 1 {
			assert.Less(t, (n+1)*got, tc.limit/10, "the fleet's and a view's own double count, within the last tenth")
		}
	}
}

// TestWantHoldsMost: a key's lease requests never take what it holds unused
// past holdMost, the current bucket's unused units and the next bucket's
// lease together; the units it used do not count.
func TestWantHoldsMost(t *testing.T) {
	t.Parallel()
	tb, geo, s, t0, r := leasedKey(t, 1000, 2)
	tb.setLimits(tableport.Limits{Cap: 2, Share: 250, Mode: policy.FailLocal}) // holdMost 19
	k := geo.Index(t0)
	admitUntil(t, tb, "k", t0, 100)
	s.add("k", k-1, 400) // the fleet's bucket before: its part is 100
	grant(tb, geo, s, r, t0, 12)
	assert.Equal(t, int64(19-12), tb.syncView().Want(r, t0, 0), "12 held unused")
	assert.Equal(t, int64(19-12), tb.syncView().Want(r, t0, 300), "a peak past holdMost too")
	for range 10 {
		require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
	}
	assert.Equal(t, int64(2), tb.leaseLeft(entryOf(r), k))
	assert.Equal(t, int64(19-2), tb.syncView().Want(r, t0, 0), "the used units do not count")
	s.add("k", k+1, 9)
	tb.syncView().Settle(r, t0, nil, oldest(geo, k), s.push("k", nil, oldest(geo, k), geo.Span()), Bucket{Index: k + 1, Count: 9})
	assert.Equal(t, int64(19-2-9), tb.syncView().Want(r, t0, 0), "nor does the next bucket's lease")
	assert.Equal(t, int64(19-2-9), tb.syncView().NextWant(r, t0+geo.Sub()/2, 100), "a lease ahead: past both")
	t1 := t0 + geo.Sub()
	tb.tick(t1)
	tb.syncView().Settle(r, t1, nil, k, []int64{400, 9}, Bucket{}) // the fleet's bucket k: a part of 100
	assert.Equal(t, int64(19-9-2), tb.syncView().Want(r, t1, 0), "the bucket after: its lease, and the old one's unused units until it ends")
	unused, done := tb.syncView().Release(r, k, t1, false)
	require.True(t, done)
	assert.Equal(t, int64(2), unused)
	assert.Equal(t, int64(19-9), tb.syncView().Want(r, t1, 0), "the old lease ended: its units go back to the store with the next call")
}

// TestAskHeldLease: a key whose lease is held to holdMost asks for an early
// sync once it has half of its cap and holdMost left, not at every admission
// after a sync settled: with a lease's used units in its pend, 2·pend ≥
// budget holds for most of a bucket once it has used more than holdMost.
func TestAskHeldLease(t *testing.T) {
	t.Parallel()
	tb, geo, s, t0, r := leasedKey(t, 1000, 2)
	tb.setLimits(tableport.Limits{Cap: 2, Share: 250, Mode: policy.FailLocal}) // holdMost 19: asks with 10 or less left
	tb.tick(t0)
	asked := func() bool { return len(tb.syncView().Early(nil)) > 0 }
	asked() // the first admission's ask (a key never synced), served by the grant
	grant(tb, geo, s, r, t0, 19)
	require.False(t, asked())
	// Allowance 2 + 19 = 21: the key asks once it has 10 left.
	until := func() (n int) {
		for !asked() {
			require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
			n++
			require.Less(t, n, 40, "it asks before its allowance runs out")
		}
		return n
	}
	assert.Equal(t, 11, until(), "21 − 11 = 10 left")
	grant(tb, geo, s, r, t0, tb.syncView().Want(r, t0, 0))
	require.Equal(t, int64(19), tb.leaseLeft(entryOf(r), geo.Index(t0)), "topped up to holdMost: 11 more")
	// Budget 2 + 30 = 32 with 11 used: 2·pend ≥ budget from the 5th
	// admission on, but 10 left only at the 11th.
	assert.Equal(t, 11, until(), "32 − 22 = 10 left")
}
