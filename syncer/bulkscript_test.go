package syncer

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
)

// bulkRule is the per-rule part of a bulkScript call.
type bulkRule struct {
	sub   int64 // µs
	span  int
	ttl   int64 // ms
	bound int
	base  int64 // the caller's current bucket
}

// bulkPush is one limiter key of a bulkScript call.
type bulkPush struct {
	key    string
	rule   int // 1-based
	deltas [][2]int64
	drop   bool // clean now: the caller left a reservation record
}

// runBulk calls bulkScript the way Syncer.bulkArgs does and returns now µs,
// the applied flag and the failed key indices. keys must be in the script's
// order: by rule, and within a rule first the keys with one count in the
// rule's base bucket (consecutive ones with the same count share it), then
// the others.
func runBulk(t *testing.T, c redis.Scripter, marker, seq string, rules []bulkRule, keys ...bulkPush) (int64, int64, []int64) {
	t.Helper()
	plain := func(k bulkPush) bool {
		return !k.drop && len(k.deltas) == 1 && k.deltas[0][0] == rules[k.rule-1].base && k.deltas[0][1] > 0
	}
	ks := []string{marker}
	args := []any{seq, 60_000, "me", len(rules), ""} // no epoch: checks none
	var stream []any
	for r := range rules {
		var mine []bulkPush
		for _, k := range keys {
			if k.rule == r+1 {
				mine = append(mine, k)
			}
		}
		np := 0
		for np < len(mine) && plain(mine[np]) {
			np++
		}
		for i := 0; i < np; {
			j := i + 1
			for j < np && mine[j].deltas[0][1] == mine[i].deltas[0][1] {
				j++
			}
			if j-i > 1 {
				stream = append(stream, i-j)
			}
			stream = append(stream, mine[i].deltas[0][1])
			i = j
		}
		for _, k := range mine[np:] {
			require.False(t, plain(k), "the keys with one count in the base bucket come first")
			var toks []string
			if k.drop {
				toks = append(toks, "!")
			}
			for _, d := range k.deltas {
				toks = append(toks, itoa(d[0])+":"+itoa(d[1]))
			}
			stream = append(stream, strings.Join(toks, " "))
		}
		for _, k := range mine {
			ks = append(ks, k.key)
		}
		args = append(args, rules[r].sub, rules[r].span, rules[r].ttl, rules[r].bound, rules[r].base, np, len(mine)-np)
	}
	for i := 1; i < len(keys); i++ {
		require.LessOrEqual(t, keys[i-1].rule, keys[i].rule, "keys grouped by rule")
	}
	ks = append(ks, marker+":epoch")
	v, err := bulkScript.Run(ctxT(t, opTimeout), c, ks, append(args, stream...)...).Int64Slice()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(v), 2)
	return v[0], v[1], v[2:]
}

// TestBulkScript pushes several keys of two rules in one call (keys sharing
// a count, one with a count of its own, keys with tokens), sends the call
// again (skipped whole), and checks the window rules, the TTL and a key of
// the wrong type failing alone.
func TestBulkScript(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	ctx := ctxT(t, opTimeout)
	nowUs := storeTimeUs(t, c)
	const k = 1000
	rules := []bulkRule{
		{sub: midSubUs(nowUs, k), span: 3, ttl: 60_000, bound: 40, base: k},
		{sub: midSubUs(nowUs, k), span: 1, ttl: 30_000, bound: 40, base: k},
	}
	require.NoError(t, c.Set(ctx, "str", "x", 0).Err())
	seq := itoa(nowUs)
	push := []bulkPush{
		{"str", 1, [][2]int64{{k, 1}}, false},
		{"c", 1, [][2]int64{{k, 1}}, false},
		{"d", 1, [][2]int64{{k, 2}}, false},
		{"a", 1, [][2]int64{{k, 3}, {k - 2, 4}, {k - 3, 5} /* out of the window */, {k + 7, 1} /* future: current */}, false},
		{"b", 2, [][2]int64{{k, 2}, {k - 1, 9} /* out of a span-1 window */}, false},
		{"e", 2, [][2]int64{{k - 1, 9}} /* out of a span-1 window */, false},
	}
	now, applied, failed := runBulk(t, c, "m", seq, rules, push...)
	assert.InDelta(t, nowUs, now, float64(5*time.Second/time.Microsecond), "now is the store's TIME in µs")
	assert.Equal(t, int64(1), applied)
	assert.Equal(t, []int64{1}, failed, "the string key fails alone, not the rest of its count group")
	assert.Equal(t, map[string]string{itoa(k): "1"}, hash(t, c, "c"))
	assert.Equal(t, map[string]string{itoa(k): "2"}, hash(t, c, "d"))
	assert.Equal(t, map[string]string{itoa(k): "4", itoa(k - 2): "4"}, hash(t, c, "a"))
	assert.Equal(t, map[string]string{itoa(k): "2"}, hash(t, c, "b"))
	assert.Empty(t, hash(t, c, "e"))
	assert.Equal(t, "x", c.Get(ctx, "str").Val(), "untouched")
	assert.Equal(t, seq+":1", c.Get(ctx, "m").Val(), "the marker holds the call's number and its failed keys")
	for key, ttl := range map[string]time.Duration{"a": time.Minute, "b": 30 * time.Second} {
		pttl, err := c.PTTL(ctx, key).Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, pttl, ttl, key)
		assert.Greater(t, pttl, ttl-5*time.Second, key)
	}

	// The same call again (a lost reply, a go-redis retry): skipped whole,
	// with the failed keys it recorded; an older one: skipped.
	_, applied, failed = runBulk(t, c, "m", seq, rules, push...)
	assert.Equal(t, int64(0), applied)
	assert.Equal(t, []int64{1}, failed, "the resend learns which keys failed")
	_, applied, failed = runBulk(t, c, "m", itoa(nowUs-1), rules, push...)
	assert.Equal(t, int64(0), applied)
	assert.Empty(t, failed)
	assert.Equal(t, map[string]string{itoa(k): "4", itoa(k - 2): "4"}, hash(t, c, "a"), "nothing counted twice")
	assert.Equal(t, map[string]string{itoa(k): "1"}, hash(t, c, "c"))
	assert.Equal(t, seq+":1", c.Get(ctx, "m").Val())

	// A newer call is applied on top.
	_, applied, _ = runBulk(t, c, "m", itoa(nowUs+1), rules, bulkPush{"a", 1, [][2]int64{{k, 1}}, false})
	assert.Equal(t, int64(1), applied)
	assert.Equal(t, "5", c.HGet(ctx, "a", itoa(k)).Val())
	assert.Equal(t, itoa(nowUs+1), c.Get(ctx, "m").Val(), "no failed keys")
}

// TestBulkScriptCleanup lets a hash grow past the field bound: the next push
// that starts a bucket removes the buckets out of the window and stale
// bookkeeping and the caller's reservation records, keeps the rest, and
// refreshes the TTL; a push into a bucket that exists does neither.
func TestBulkScriptCleanup(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	ctx := ctxT(t, opTimeout)
	nowUs := storeTimeUs(t, c)
	const k = 1000
	r := bulkRule{sub: midSubUs(nowUs, k), span: 2, ttl: 60_000, bound: 6, base: k}
	stale := itoa(nowUs - r.ttl*1000 - int64(time.Second/time.Microsecond))
	fresh := itoa(nowUs)
	require.NoError(t, c.HSet(ctx, "h",
		itoa(k-4), "1", itoa(k-3), "1", itoa(k-2), "1", // out of the window
		itoa(k-1), "1",
		"i:old", stale, "i:fresh", fresh, "r1:fresh", fresh+":1:5",
		"i:me", fresh, "r2:me", fresh+":1:5", // the caller's
	).Err())
	_, applied, failed := runBulk(t, c, "m", fresh, []bulkRule{r}, bulkPush{"h", 1, [][2]int64{{k, 2}}, false})
	require.Equal(t, int64(1), applied)
	require.Empty(t, failed)
	assert.Equal(t, map[string]string{
		itoa(k - 1): "1", itoa(k): "2",
		"i:fresh": fresh, "r1:fresh": fresh + ":1:5",
		"i:me": fresh, // the caller's reservation record goes, its sequence number stays
	}, hash(t, c, "h"))
	pttl, err := c.PTTL(ctx, "h").Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 50*time.Second, "a started bucket refreshes the TTL")

	// A push into the bucket that exists: no cleanup, no TTL refresh.
	require.NoError(t, c.HSet(ctx, "h", itoa(k-5), "1").Err())
	for range 4 {
		require.NoError(t, c.HSet(ctx, "h", "i:x"+itoa(int64(len(hash(t, c, "h")))), fresh).Err())
	}
	require.NoError(t, c.PExpire(ctx, "h", 20*time.Second).Err())
	runBulk(t, c, "m", itoa(nowUs+1), []bulkRule{r}, bulkPush{"h", 1, [][2]int64{{k, 1}}, false})
	assert.Equal(t, "1", c.HGet(ctx, "h", itoa(k-5)).Val(), "not cleaned")
	assert.Equal(t, "3", c.HGet(ctx, "h", itoa(k)).Val())
	pttl, err = c.PTTL(ctx, "h").Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, pttl, 20*time.Second, "not refreshed")

	// Asked to (the caller left a reservation record), a push into the
	// bucket that exists cleans too, without refreshing the TTL.
	require.NoError(t, c.HSet(ctx, "h", "r3:me", fresh+":1:5").Err())
	runBulk(t, c, "m", itoa(nowUs+2), []bulkRule{r}, bulkPush{"h", 1, [][2]int64{{k, 1}}, true})
	h := hash(t, c, "h")
	assert.NotContains(t, h, "r3:me")
	assert.NotContains(t, h, itoa(k-5))
	assert.Equal(t, "4", h[itoa(k)])
	pttl, err = c.PTTL(ctx, "h").Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, pttl, 20*time.Second, "not refreshed")
}

// TestBulkScriptBase pushes keys whose only count is in the rule's base
// bucket (one argument each, the count alone) with the base where the
// caller's clock can put it against the store's: the current bucket, an
// earlier one of the window, one past the store's (counted in the current
// one) and one already out of the window (dropped).
func TestBulkScriptBase(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	nowUs := storeTimeUs(t, c)
	const k = 1000
	for i, tc := range []struct {
		name string
		base int64
		want map[string]string
	}{
		{"current", k, map[string]string{itoa(k): "3"}},
		{"earlier", k - 2, map[string]string{itoa(k - 2): "3"}},
		{"ahead", k + 1, map[string]string{itoa(k): "3"}},
		{"out of the window", k - 3, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := bulkRule{sub: midSubUs(nowUs, k), span: 3, ttl: 60_000, bound: 40, base: tc.base}
			key := "h" + itoa(int64(i))
			_, applied, failed := runBulk(t, c, "m"+key, itoa(nowUs), []bulkRule{r}, bulkPush{key, 1, [][2]int64{{tc.base, 3}}, false})
			assert.Equal(t, int64(1), applied)
			assert.Empty(t, failed)
			assert.Equal(t, tc.want, hash(t, c, key))
		})
	}
}
