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
			assert.Equal(t, int64(k), got.grantAt, "in the current bucket")
			assert.Equal(t, tc.totals, got.totals, "the grant counts in the current bucket")
			assert.Equal(t, tc.totals[0]+tc.totals[1], total(t, c, key), "and in the hash")

			again := runSync(t, c, key, r, sbatch{seq: seq, deltas: tc.deltas})
			assert.Zero(t, again.grant, "a resend grants nothing new")
			assert.Equal(t, tc.totals, again.totals, "nor counts anything twice")
			if tc.grant > 0 || len(tc.costs) > 0 {
				require.Equal(t, []int64{1}, again.status)
				assert.Regexp(t, `^[01]*:`+itoa(k)+`:`+itoa(tc.grant)+`:`+itoa(k)+`$`, again.bits[0], "the recorded grant comes back, with its bucket")
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

// TestSyncScriptLeaseNext: a lease asked for the next bucket is counted there
// at once, returned inside the current bucket's total (for the other
// instances' views), and every decision counts it: a reservation in the
// current bucket, and a lease of it, see the room the next bucket's grant
// leaves. A resend returns the recorded grant with its bucket.
func TestSyncScriptLeaseNext(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	nowUs := storeTimeUs(t, c)
	const k = 1000
	sub := midSubUs(nowUs, k)
	r := scriptRule{sub: sub, span: 2, limit: 100, ttl: 60_000, inst: "a", exact: true, lease: 1, want: 1000, next: true}
	seq := itoa(nowUs)
	got := runSync(t, c, "next", r, sbatch{seq: seq, deltas: [][2]int64{{k, 10}}})
	require.InDelta(t, 0.5, got.phase(sub, 2), 0.01, "harness: the call is mid-bucket")
	assert.Equal(t, int64(40), got.grant, "floor((100 − 10 − 10) / 2)")
	assert.Equal(t, int64(k+1), got.grantAt)
	assert.Equal(t, []int64{0, 10 + 40}, got.totals, "the current bucket's total includes the next one's, for the other instances' views")
	h := hash(t, c, "next")
	assert.Equal(t, "40", h[itoa(k+1)], "counted in the next bucket")
	assert.Equal(t, seq+"::"+itoa(k)+":40:"+itoa(k+1), h["r"+seq+":a"], "recorded with its bucket")

	again := runSync(t, c, "next", r, sbatch{seq: seq})
	assert.Zero(t, again.grant, "a resend grants nothing new")
	assert.Equal(t, []string{":" + itoa(k) + ":40:" + itoa(k+1)}, again.bits, "the recorded grant comes back, with its bucket")

	// Room left for the current bucket: 100 − 10 − 40 = 50.
	b := runSync(t, c, "next", scriptRule{sub: sub, span: 2, limit: 100, ttl: 60_000, inst: "b", exact: true},
		sbatch{seq: itoa(nowUs + 1), costs: []int64{51, 50, 1}})
	assert.Equal(t, []string{"010"}, b.bits, "a reservation counts the next bucket's lease")
	l := runSync(t, c, "next", scriptRule{sub: sub, span: 2, limit: 100, ttl: 60_000, inst: "c", exact: true, lease: 1, want: 1000},
		sbatch{seq: itoa(nowUs + 2)})
	assert.Zero(t, l.grant, "and so does a lease of the current bucket")
	assert.Equal(t, int64(k), l.grantAt)
}

// TestSyncScriptLeaseNextOldest: a reservation in the current bucket counts
// the next bucket's grants in place of the oldest bucket's part where they
// are more, not its place and theirs: it is in the window that ends in the
// current bucket (the oldest bucket, not the grants) and in the one after
// (the grants, not the oldest bucket), never in one that holds both. A
// lease counts the grants on top of the window, as the pulls return them to
// the views. Each case holds old units in the oldest bucket; instance a
// pushes 10 in the current bucket and asks for a lease of the next, then
// instance c asks for one too; instance b then asks for two reservations in
// the current bucket, the room and one unit more.
func TestSyncScriptLeaseNextOldest(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	nowUs := storeTimeUs(t, c)
	const k = 1000
	sub := midSubUs(nowUs, k)
	cases := []struct {
		name   string
		span   int
		exact  bool
		old    int64   // units in the oldest bucket (span 1: none besides the push)
		grant  int64   // a's lease of the next bucket
		totals []int64 // what a's pull returns
		second int64   // c's lease of the next bucket
		room   int64   // what a reservation in the current bucket may take then
	}{
		// a: window 10 + 30, floor((100 − 40 − 10) / 2); c: floor((100 − 40
		// − 25 − 10) / 2); b: 10 + max(30, 25 + 12).
		{"whole, grants below the oldest bucket", 2, true, 30, 25, []int64{30, 10 + 25}, 12, 100 - 10 - 37},
		// a: floor((100 − 15 − 10) / 2); c: floor((100 − 15 − 37 − 10) / 2);
		// b: 10 + max(5, 37 + 19).
		{"whole, grants above the oldest bucket", 2, true, 5, 37, []int64{5, 10 + 37}, 19, 100 - 10 - 56},
		// a: 10 + 30·0.5 = 25: floor((100 − 25 − 10) / 2); c: floor((100 −
		// 25 − 32 − 10) / 2); b: 10 + max(30·0.5, 32 + 16).
		{"weighted, half way through the bucket", 2, false, 30, 32, []int64{30, 10 + 32}, 16, 100 - 10 - 48},
		// One bucket, its own oldest. a: floor((100 − 10 − 10) / 2); c:
		// floor((100 − 10 − 40 − 10) / 2); b: max(10, 40 + 20).
		{"fixed window", 1, true, 0, 40, []int64{10 + 40}, 20, 100 - 60},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := "oldest:" + itoa(int64(i))
			if tc.old > 0 {
				require.NoError(t, c.HSet(ctxT(t, opTimeout), key, itoa(k-1), itoa(tc.old)).Err())
			}
			r := scriptRule{sub: sub, span: tc.span, limit: 100, ttl: 60_000, inst: "a", exact: tc.exact, lease: 1, want: 1000, next: true}
			got := runSync(t, c, key, r, sbatch{seq: itoa(nowUs), deltas: [][2]int64{{k, 10}}})
			require.InDelta(t, 0.5, got.phase(sub, tc.span), 0.01, "harness: the call is mid-bucket")
			assert.Equal(t, tc.grant, got.grant)
			assert.Equal(t, int64(k+1), got.grantAt)
			assert.Equal(t, tc.totals, got.totals, "the grants whole in the current bucket's total")
			r.inst = "c"
			second := runSync(t, c, key, r, sbatch{seq: itoa(nowUs + 1)})
			assert.Equal(t, tc.second, second.grant, "a lease counts the grants on top of the window")
			b := runSync(t, c, key, scriptRule{sub: sub, span: tc.span, limit: 100, ttl: 60_000, inst: "b", exact: tc.exact},
				sbatch{seq: itoa(nowUs + 2), costs: []int64{tc.room + 1, tc.room}})
			assert.Equal(t, []string{"01"}, b.bits, "room %d in the current bucket", tc.room)
		})
	}
}

// TestSyncScriptLeaseNextReturned: the unused units of a lease of the next
// bucket, given back before that bucket starts (Flush, Close, a grant the
// instance could not hold), leave the next bucket; a negative delta for the
// next bucket that holds less than it is counted in the current one, as is
// any positive delta past the current bucket.
func TestSyncScriptLeaseNextReturned(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	nowUs := storeTimeUs(t, c)
	const k = 1000
	sub := midSubUs(nowUs, k)
	r := scriptRule{sub: sub, span: 2, limit: 100, ttl: 60_000, inst: "a", exact: true, lease: 1, want: 30, next: true}
	got := runSync(t, c, "ret", r, sbatch{seq: itoa(nowUs), deltas: [][2]int64{{k, 10}}})
	require.Equal(t, int64(30), got.grant)
	r.lease = 0
	runSync(t, c, "ret", r, sbatch{seq: itoa(nowUs + 1), deltas: [][2]int64{{k + 1, -25}}})
	assert.Equal(t, map[int64]int64{k: 10, k + 1: 5}, buckets(t, c, "ret"), "25 units given back from the next bucket")
	runSync(t, c, "ret", r, sbatch{seq: itoa(nowUs + 2), deltas: [][2]int64{{k + 1, -6}, {k + 1, 3}}})
	assert.Equal(t, map[int64]int64{k: 10 - 6 + 3, k + 1: 5}, buckets(t, c, "ret"), "more than the next bucket holds, and a count past the current bucket: the current one")
}
