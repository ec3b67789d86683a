package syncer

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
)

// sbatch is one batch of a syncScript call.
type sbatch struct {
	seq    string
	deltas [][2]int64 // (bucket, count)
	costs  []int64
}

// scriptRule is the per-rule part of a syncScript call.
type scriptRule struct {
	sub   int64 // µs
	span  int
	limit int64
	ttl   int64 // ms
	inst  string
	// exact makes the oldest bucket count whole (window.NewSliding); the
	// zero value weighs it by its overlap (window.NewWeighted).
	exact bool
	// lease is N̂ to ask for a lease, 0 not to; want the units wanted;
	// next asks for it in the next bucket.
	lease, want int64
	next        bool
}

// sreply is a parsed syncScript reply.
type sreply struct {
	now, oldest int64
	totals      []int64
	status      []int64
	bits        []string
	grant       int64 // the lease granted
	grantAt     int64 // the bucket it is counted in
}

// runSync calls syncScript the way Syncer.args does.
func runSync(t *testing.T, c redis.Scripter, key string, r scriptRule, bs ...sbatch) sreply {
	t.Helper()
	weigh := "1"
	if r.exact {
		weigh = "0"
	}
	next := "0"
	if r.next {
		next = "1"
	}
	args := []any{r.sub, r.span, r.limit, r.ttl, r.inst, len(bs), weigh, r.lease, r.want, next, ""} // no epoch: checks none
	for _, b := range bs {
		args = append(args, b.seq, len(b.deltas), len(b.costs))
		for _, d := range b.deltas {
			args = append(args, d[0], d[1])
		}
		for _, n := range b.costs {
			args = append(args, n)
		}
	}
	v, err := syncScript.Run(ctxT(t, opTimeout), c, []string{key}, args...).Slice()
	require.NoError(t, err)
	require.Len(t, v, 4+r.span+2*len(bs))
	var out sreply
	var ok bool
	out.now, ok = v[0].(int64)
	require.True(t, ok, "now %v", v[0])
	out.oldest, ok = v[1].(int64)
	require.True(t, ok, "oldest %v", v[1])
	for _, x := range v[2 : 2+r.span] {
		n, ok := x.(int64)
		require.True(t, ok, "total %v", x)
		out.totals = append(out.totals, n)
	}
	out.grant, ok = v[len(v)-2].(int64)
	require.True(t, ok, "grant %v", v[len(v)-2])
	out.grantAt, ok = v[len(v)-1].(int64)
	require.True(t, ok, "grant bucket %v", v[len(v)-1])
	for i := 2 + r.span; i < len(v)-2; i += 2 {
		st, ok := v[i].(int64)
		require.True(t, ok, "status %v", v[i])
		bits, ok := v[i+1].(string)
		require.True(t, ok, "bits %v", v[i+1])
		out.status = append(out.status, st)
		out.bits = append(out.bits, bits)
	}
	return out
}

// phase returns the phase of the reply's now in its bucket.
func (r sreply) phase(sub int64, span int) float64 {
	k := r.oldest + int64(span) - 1
	return float64(r.now-k*sub) / float64(sub)
}

// TestSyncScriptPushAndResend pushes one batch and sends it again: the resend
// is recognised by its sequence number, counts nothing twice and returns the
// stored reservation results.
func TestSyncScriptPushAndResend(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	nowUs := storeTimeUs(t, c)
	const k = 1000
	r := scriptRule{sub: midSubUs(nowUs, k), span: 3, limit: 20, ttl: 60_000, inst: "a"}
	seq := itoa(nowUs)
	b := sbatch{
		seq: seq,
		deltas: [][2]int64{
			{k, 3},
			{k - 1, 2},
			{k - 2, 4},
			{k - 3, 5},  // older than the window: dropped
			{k + 5, 1},  // a future bucket (clock skew): counted in the current one
			{k - 1, 0},  // zero: ignored
			{k - 9, -3}, // out of the window: ignored
		},
		// Estimate after the deltas: 4·(1−φ) + 2 + 4 ≈ 8 with φ ≈ ½.
		costs: []int64{1, 100, 2},
	}
	first := runSync(t, c, "h", r, b)
	require.InDelta(t, 0.5, first.phase(r.sub, r.span), 0.01, "harness: the call is mid-bucket")
	assert.InDelta(t, nowUs, first.now, float64(5*time.Second/time.Microsecond), "now is the store's TIME in µs")
	assert.Equal(t, int64(k-2), first.oldest)
	assert.Equal(t, []int64{4, 2, 3 + 1 + 1 + 2}, first.totals)
	assert.Equal(t, []int64{0}, first.status, "applied now")
	assert.Equal(t, []string{"101"}, first.bits)

	want := map[string]string{
		itoa(k - 2):      "4",
		itoa(k - 1):      "2",
		itoa(k):          "7",
		"i:a":            seq,
		"r" + seq + ":a": seq + ":101:" + itoa(k) + ":0:" + itoa(k), // results, the bucket they count in, no lease (its bucket)
	}
	assert.Equal(t, want, hash(t, c, "h"))

	again := runSync(t, c, "h", r, b)
	assert.Equal(t, first.totals, again.totals, "the resend counts nothing")
	assert.Equal(t, []int64{1}, again.status, "applied before, results known")
	assert.Equal(t, []string{"101:" + itoa(k) + ":0:" + itoa(k)}, again.bits, "the stored reservation results, bucket and lease")
	assert.Equal(t, want, hash(t, c, "h"), "the resend writes nothing")

	// The same batch with its reservations stripped (as the syncer resends
	// it) is recognised too.
	b.costs = nil
	stripped := runSync(t, c, "h", r, b)
	assert.Equal(t, []int64{1}, stripped.status)
	assert.Equal(t, []string{"101:" + itoa(k) + ":0:" + itoa(k)}, stripped.bits)
	assert.Equal(t, first.totals, stripped.totals)
}

// TestSyncScriptSequence covers batches older than the last one applied, and
// calls carrying several batches.
func TestSyncScriptSequence(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	nowUs := storeTimeUs(t, c)
	const k = 1000
	r := scriptRule{sub: midSubUs(nowUs, k), span: 2, limit: 1000, ttl: 60_000, inst: "a"}
	seq := func(d int64) string { return itoa(nowUs + d) }

	got := runSync(t, c, "h", r, sbatch{seq: seq(10), deltas: [][2]int64{{k, 1}}, costs: []int64{1}})
	require.Equal(t, []int64{0}, got.status)
	require.Equal(t, []string{"1"}, got.bits)
	require.Equal(t, []int64{0, 2}, got.totals)

	// An older sequence number after a newer one is skipped, deltas and
	// reservations alike; its results are not the stored ones: status 2.
	got = runSync(t, c, "h", r, sbatch{seq: seq(5), deltas: [][2]int64{{k, 100}}, costs: []int64{1}})
	assert.Equal(t, []int64{2}, got.status)
	assert.Equal(t, []string{""}, got.bits)
	assert.Equal(t, []int64{0, 2}, got.totals)
	assert.Equal(t, seq(10), hash(t, c, "h")["i:a"], "the last sequence number stays")

	// Another instance has its own sequence.
	got = runSync(t, c, "h", scriptRule{r.sub, r.span, r.limit, r.ttl, "b", r.exact, r.lease, r.want, r.next}, sbatch{seq: seq(5), deltas: [][2]int64{{k, 4}}})
	assert.Equal(t, []int64{0}, got.status)
	assert.Equal(t, []int64{0, 6}, got.totals)

	// A resent batch followed by a new one: the first is recognised (its
	// results are stored), the second applied.
	kb := ":" + itoa(k) + ":0:" + itoa(k) // the bucket, and no lease
	got = runSync(t, c, "h", r,
		sbatch{seq: seq(10), deltas: [][2]int64{{k, 1}}},
		sbatch{seq: seq(20), deltas: [][2]int64{{k, 3}}, costs: []int64{2, 2000}})
	assert.Equal(t, []int64{1, 0}, got.status)
	assert.Equal(t, []string{"1" + kb, "10"}, got.bits)
	assert.Equal(t, []int64{0, 11}, got.totals)

	// Both resent (both replies lost): the results of both are still known.
	got = runSync(t, c, "h", r,
		sbatch{seq: seq(10), deltas: [][2]int64{{k, 1}}},
		sbatch{seq: seq(20), deltas: [][2]int64{{k, 3}}})
	assert.Equal(t, []int64{1, 1}, got.status)
	assert.Equal(t, []string{"1" + kb, "10" + kb}, got.bits)
	assert.Equal(t, []int64{0, 11}, got.totals)
	assert.Equal(t, map[string]string{seq(10): "1" + kb, seq(20): "10" + kb}, records(t, c, "h", "a"))

	// A call whose first batch is newer shows the older ones were answered:
	// their records go. A batch without reservations stores none, so a
	// resend of it in the same call comes back as status 2.
	got = runSync(t, c, "h", r,
		sbatch{seq: seq(30), deltas: [][2]int64{{k, 1}}},
		sbatch{seq: seq(30), deltas: [][2]int64{{k, 1}}})
	assert.Equal(t, []int64{0, 2}, got.status)
	assert.Equal(t, []string{"", ""}, got.bits)
	assert.Equal(t, []int64{0, 12}, got.totals)
	assert.Empty(t, records(t, c, "h", "a"))

	// A pull (no batches) and a stale call (all batches older than the
	// last applied, e.g. executed late after the sender gave up) prune no
	// record the sender may still ask for.
	got = runSync(t, c, "h", r, sbatch{seq: seq(40), costs: []int64{1}})
	assert.Equal(t, []int64{0}, got.status)
	runSync(t, c, "h", r)
	runSync(t, c, "h", r, sbatch{seq: seq(35)})
	assert.Equal(t, map[string]string{seq(40): "1" + kb}, records(t, c, "h", "a"))
	got = runSync(t, c, "h", r, sbatch{seq: seq(40)}, sbatch{seq: seq(50)})
	assert.Equal(t, []int64{1, 0}, got.status)
	assert.Equal(t, []string{"1" + kb, ""}, got.bits)
	assert.Equal(t, map[string]string{seq(40): "1" + kb}, records(t, c, "h", "a"), "still unanswered")
	runSync(t, c, "h", r, sbatch{seq: seq(60)})
	assert.Empty(t, records(t, c, "h", "a"))
	assert.Empty(t, records(t, c, "h", "b"), "no reservations, no records")
}

// TestSyncScriptReservations decides reservations against the window's
// estimate: in order, each admitted while estimate+cost ≤ limit, with the
// oldest bucket weighted by 1−φ for weighted sliding windows (span > 1),
// whole for exact ones, and not at all for a fixed window (span 1). Every
// call is made at φ just above ½.
func TestSyncScriptReservations(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	nowUs := storeTimeUs(t, c)
	const k = 1000
	sub := midSubUs(nowUs, k)
	ones := func(n int) []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = 1
		}
		return s
	}
	cases := []struct {
		name   string
		span   int
		limit  int64
		deltas [][2]int64
		costs  []int64
		bits   string
		totals []int64
		exact  bool
	}{
		{"fixed counts the current bucket whole", 1, 10, [][2]int64{{k, 7}}, []int64{2, 2, 1, 1}, "1010", []int64{10}, false},
		{"fixed applies no weighting", 1, 10, [][2]int64{{k, 10}}, []int64{1}, "0", []int64{10}, false},
		{"fixed drops the previous bucket", 1, 10, [][2]int64{{k - 1, 10}}, []int64{10}, "1", []int64{10}, false},
		{"sliding B=1 weights the oldest by 1-phase", 2, 100, [][2]int64{{k - 1, 100}}, ones(51), strings.Repeat("1", 50) + "0", []int64{100, 50}, false},
		{"sliding B=2 counts the newer buckets whole", 3, 100, [][2]int64{{k - 2, 40}, {k - 1, 30}, {k, 10}}, []int64{41, 40, 1}, "010", []int64{40, 30, 50}, false},
		{"a denial does not stop smaller later ones", 2, 10, [][2]int64{{k, 5}}, []int64{6, 5, 1}, "010", []int64{0, 10}, false},
		{"exactly the limit", 2, 3, nil, ones(4), "1110", []int64{0, 3}, false},
		{"corrections count before reservations", 2, 10, [][2]int64{{k, 5}, {k, -2}}, []int64{7, 1}, "10", []int64{0, 10}, false},
		{"cost above the limit", 2, 5, nil, []int64{6, 5}, "01", []int64{0, 5}, false},
		{"a full window admits nothing", 3, 10, [][2]int64{{k - 1, 10}}, []int64{1}, "0", []int64{0, 10, 0}, false},
		{"exact B=1 counts the oldest whole", 2, 100, [][2]int64{{k - 1, 60}}, ones(41), strings.Repeat("1", 40) + "0", []int64{60, 40}, true},
		{"exact B=2 counts every bucket whole", 3, 100, [][2]int64{{k - 2, 40}, {k - 1, 30}, {k, 10}}, []int64{21, 20, 1}, "010", []int64{40, 30, 30}, true},
		{"exact drops the bucket before the oldest", 2, 10, [][2]int64{{k - 2, 10}}, []int64{10}, "1", []int64{0, 10}, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := "res:" + itoa(int64(i))
			r := scriptRule{sub: sub, span: tc.span, limit: tc.limit, ttl: 60_000, inst: "a", exact: tc.exact}
			got := runSync(t, c, key, r, sbatch{seq: itoa(nowUs), deltas: tc.deltas, costs: tc.costs})
			require.InDelta(t, 0.5, got.phase(sub, tc.span), 0.01, "harness: the call is mid-bucket")
			assert.Equal(t, []int64{0}, got.status)
			assert.Equal(t, []string{tc.bits}, got.bits)
			assert.Equal(t, tc.totals, got.totals)
			var want int64
			for _, n := range tc.totals {
				want += n
			}
			assert.Equal(t, want, total(t, c, key), "the hash holds the totals")
		})
	}
}

// TestSyncScriptCleanup checks that a pull writes nothing, and that a call
// that starts a bucket deletes buckets older than the window, "i:"/"r:"
// fields older than the TTL and junk, and sets the TTL.
func TestSyncScriptCleanup(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	nowUs := storeTimeUs(t, c)
	const k = 1000
	r := scriptRule{sub: midSubUs(nowUs, k), span: 2, limit: 10, ttl: 60_000, inst: "a"}
	stale := itoa(nowUs - r.ttl*1000 - int64(time.Second/time.Microsecond))
	fresh := itoa(nowUs)
	ctx := ctxT(t, opTimeout)
	before := map[string]string{
		itoa(k - 2): "5", // older than the window
		itoa(k - 1): "1",
		"junk":      "1",
		"i:old":     stale,
		"r:old":     stale + ":1",
		"i:fresh":   fresh,
		"r:fresh":   fresh + ":0",
		"i:bad":     "x",
	}
	require.NoError(t, c.HSet(ctx, "h", before).Err())

	// A pull writes nothing and cleans nothing: it starts no bucket.
	got := runSync(t, c, "h", r)
	assert.Equal(t, []int64{1, 0}, got.totals)
	assert.Empty(t, got.status)
	assert.Equal(t, before, hash(t, c, "h"))

	// A push that starts the current bucket cleans the hash and refreshes
	// its TTL.
	seq := itoa(nowUs + 1)
	got = runSync(t, c, "h", r, sbatch{seq: seq, deltas: [][2]int64{{k, 2}}})
	assert.Equal(t, []int64{0}, got.status)
	assert.Equal(t, []int64{1, 2}, got.totals)
	assert.Equal(t, map[string]string{
		itoa(k - 1): "1",
		itoa(k):     "2",
		"i:fresh":   fresh,
		"r:fresh":   fresh + ":0",
		"i:a":       seq,
	}, hash(t, c, "h"))
	ttl, err := c.PTTL(ctx, "h").Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, ttl, time.Duration(r.ttl)*time.Millisecond)
	assert.Greater(t, ttl, time.Duration(r.ttl)*time.Millisecond-5*time.Second)

	// A stale "i:" no longer protects: a batch at or below the stale
	// sequence number is applied (the TTL outlives every bucket it could
	// have counted in, so nothing in the window is counted twice).
	got = runSync(t, c, "h", scriptRule{r.sub, r.span, r.limit, r.ttl, "old", r.exact, r.lease, r.want, r.next}, sbatch{seq: stale, deltas: [][2]int64{{k, 1}}})
	assert.Equal(t, []int64{0}, got.status)
	assert.Equal(t, []int64{1, 3}, got.totals)
}

// TestSyncScriptExactNumbers checks that bucket indices and sequence numbers
// around 1.8e15 are written exactly: Lua's default %.14g would round them.
func TestSyncScriptExactNumbers(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	// A 1µs sub-window: the bucket index is the store time in µs, ≈1.8e15.
	r := scriptRule{sub: 1, span: 1, limit: 1 << 40, ttl: 60_000, inst: "big"}
	// Sequence numbers an hour ahead of the store clock (so the TTL keeps
	// them), ≈1.8e15 and odd: a rounded one would not be.
	base := storeTimeUs(t, c)/1000*1000 + int64(time.Hour/time.Microsecond) + 1
	require.Greater(t, base, int64(1e15))
	s1, s2 := itoa(base), itoa(base+1)
	const future = math.MaxInt64 >> 10 // ≈9e15: clamped to the current bucket

	got := runSync(t, c, "h", r, sbatch{seq: s1, deltas: [][2]int64{{future, 3}}, costs: []int64{2}})
	require.Equal(t, []int64{0}, got.status)
	assert.Equal(t, got.now, got.oldest, "span 1 with 1µs buckets: the bucket is now")
	assert.Greater(t, got.oldest, int64(1e15))
	assert.Equal(t, []int64{5}, got.totals)
	assert.Equal(t, map[string]string{
		itoa(got.oldest):  "5",
		"i:big":           s1,
		"r" + s1 + ":big": s1 + ":1:" + itoa(got.oldest) + ":0:" + itoa(got.oldest),
	}, hash(t, c, "h"), "every field name and value exact")

	// The next sequence number, one above, is newer (not rounded to equal).
	got2 := runSync(t, c, "h", r, sbatch{seq: s2, deltas: [][2]int64{{future, 1}}, costs: []int64{1}})
	require.Equal(t, []int64{0}, got2.status)
	assert.Greater(t, got2.oldest, got.oldest)
	assert.Equal(t, map[string]string{
		itoa(got2.oldest): "2",
		"i:big":           s2,
		"r" + s2 + ":big": s2 + ":1:" + itoa(got2.oldest) + ":0:" + itoa(got2.oldest),
	}, hash(t, c, "h"), "the old 1µs bucket left the window, the answered record went")

	// And the one below is older.
	got3 := runSync(t, c, "h", r, sbatch{seq: s1, deltas: [][2]int64{{future, 1}}}, sbatch{seq: s2, deltas: [][2]int64{{future, 1}}})
	assert.Equal(t, []int64{2, 1}, got3.status)
	assert.Equal(t, []string{"", "1:" + itoa(got2.oldest) + ":0:" + itoa(got2.oldest)}, got3.bits)
	for f := range hash(t, c, "h") {
		assert.NotContains(t, f, "e", "no exponent in field %q", f)
		assert.NotContains(t, f, ".", "no fraction in field %q", f)
	}
}
