package systemtest

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// floodSeconds is how long TestKeyFlood floods: 2s, or SLUICE_FLOOD_SECONDS.
func floodSeconds(t *testing.T) time.Duration {
	if s := os.Getenv("SLUICE_FLOOD_SECONDS"); s != "" {
		n, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err, "SLUICE_FLOOD_SECONDS")
		return time.Duration(n * float64(time.Second))
	}
	return 2 * time.Second
}

// floodMaxKeys is TestKeyFlood's Options.MaxKeys: 5000, or
// SLUICE_FLOOD_MAXKEYS (for example the default, 1000000, to measure).
func floodMaxKeys(t *testing.T) int {
	if s := os.Getenv("SLUICE_FLOOD_MAXKEYS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "SLUICE_FLOOD_MAXKEYS")
		return n
	}
	return 5000
}

// TestKeyFlood sends one instance distinct keys as fast as the machine
// allows (every check a new key) and checks the two memory bounds:
//
//   - locally, the tracked keys never exceed Options.MaxKeys by more than the
//     number of concurrent callers (the bound is checked before an insert),
//     and the live heap after the flood stays within a budget per tracked
//     key: keys past the bound share one overflow entry per rule and cost
//     nothing;
//   - in Redis, every limiter key expires: once the flood stops, DBSIZE falls
//     back to the registry alone within Window + the key TTL.
//
// It logs the achieved rate and the memory (SLUICE_FLOOD_SECONDS floods
// longer and SLUICE_FLOOD_MAXKEYS changes the bound, for measurements without
// the race detector).
func TestKeyFlood(t *testing.T) {
	// Not parallel: its load would disturb the timing of the package's
	// other tests, which run after it.
	srv := redistest.Start(t)
	direct := srv.Client(t)
	maxKeys := floodMaxKeys(t)
	// Window 1s: keys become idle (and evictable) a second after their
	// only check, and their Redis hash expires W + W/B + 1s after its last
	// sync. ErrorBudget 0.1 gives a divergence cap of 5, so each new key is
	// admitted locally.
	rule := policy.Rule{Name: "flood", Limit: 100, Window: time.Second}
	l, err := sluice.New(sluice.Options{Redis: srv.Client(t), MaxKeys: maxKeys, ErrorBudget: 0.1}, rule)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap := ms.HeapAlloc

	workers := max(2, runtime.GOMAXPROCS(0))
	d := floodSeconds(t)
	var (
		checks, admitted atomic.Int64
		maxTracked       atomic.Int64
		maxHeap          uint64
		maxDBSize        int64
		stop             = make(chan struct{})
		wg, samplers     sync.WaitGroup
	)
	ctx := context.Background()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prefix := "f" + strconv.Itoa(w) + "-"
			var n, ok int64
			defer func() { checks.Add(n); admitted.Add(ok) }()
			for {
				for range 256 {
					d, err := l.Allow(ctx, rule.Name, prefix+strconv.FormatInt(n, 36))
					if err != nil {
						t.Errorf("Allow: %v", err)
						return
					}
					n++
					if d.Allowed {
						ok++
					}
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	samplers.Add(2)
	go func() { // tracked keys, every millisecond
		defer samplers.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if k := l.Stats().Keys; k > maxTracked.Load() {
				maxTracked.Store(k)
			}
		}
	}()
	go func() { // heap and DBSIZE, every 100ms
		defer samplers.Done()
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			maxHeap = max(maxHeap, ms.HeapAlloc)
			if n, err := direct.DBSize(ctx).Result(); err == nil {
				maxDBSize = max(maxDBSize, n)
			}
		}
	}()
	start := time.Now()
	time.Sleep(d)
	close(stop)
	wg.Wait()
	samplers.Wait()
	elapsed := time.Since(start)

	rate := float64(checks.Load()) / elapsed.Seconds()
	assert.LessOrEqual(t, maxTracked.Load(), int64(maxKeys+workers), "tracked keys within MaxKeys plus one per concurrent caller")
	assert.LessOrEqual(t, l.Stats().Keys, int64(maxKeys+workers))
	tracked := l.Stats().Keys
	runtime.GC()
	runtime.ReadMemStats(&ms)
	live := int64(ms.HeapAlloc) - int64(baseHeap)
	// A tracked key costs a few hundred bytes (entry, ring, map slot, key);
	// 2 KiB each is generous, and far below what the flood's distinct keys
	// would cost if they were all kept.
	assert.Less(t, live, int64(maxKeys)*2048, "live heap after the flood")
	if os.Getenv("SLUICE_FLOOD_MAXKEYS") == "" {
		assert.Greater(t, checks.Load(), int64(3*maxKeys), "the flood overflowed the bound several times")
	}

	// Redis: every hash expires after the window plus its TTL.
	require.NoError(t, l.Flush(ctx))
	dbAfter, err := direct.DBSize(ctx).Result()
	require.NoError(t, err)
	drained := time.Now()
	waitFor(t, 15*time.Second, "Redis to expire the flood's keys", func() bool {
		n, err := direct.DBSize(ctx).Result()
		return err == nil && n <= 1 // the registry
	})
	t.Logf("sync stats: %+v", l.Stats().Sync)
	t.Logf("flood: %d checks in %v by %d goroutines = %.0f distinct keys/s; admitted %d; max tracked %d (MaxKeys %d); "+
		"heap: base %.1f MiB, max %.1f MiB during, live +%.1f MiB after GC (%d tracked keys: %.0f B/key); Redis DBSIZE max %d, %d after the flood, <=1 after %v",
		checks.Load(), elapsed.Round(time.Millisecond), workers, rate, admitted.Load(), maxTracked.Load(), maxKeys,
		mib(baseHeap), mib(maxHeap), float64(live)/(1<<20), tracked, float64(live)/float64(max(tracked, 1)), maxDBSize, dbAfter, time.Since(drained).Round(100*time.Millisecond))
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// TestKeyLength checks the key-length policy: keys are limited in bytes
// (not runes) to Options.MaxKeyLength (default 256); a longer key is rejected
// with ErrKeyTooLong before anything is tracked or sent; and the longest
// allowed key, even when every byte needs escaping (3 bytes each in Redis),
// syncs through real Redis.
func TestKeyLength(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rule := policy.Rule{Name: "len", Limit: 10, Window: time.Minute}
	ctx := context.Background()

	// ErrorBudget 1: a divergence cap of 5, so the checks are local.
	l, err := sluice.New(sluice.Options{Redis: srv.Client(t), ErrorBudget: 1}, rule)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	longest := strings.Repeat("\xff", sluice.DefaultMaxKeyLength)
	d, err := l.Allow(ctx, rule.Name, longest)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	d, err = l.Allow(ctx, rule.Name, longest+"x")
	require.ErrorIs(t, err, sluice.ErrKeyTooLong)
	assert.False(t, d.Allowed)
	assert.Equal(t, rule.Limit, d.Limit)
	_, err = l.AllowN(ctx, rule.Name, strings.Repeat("a", 10_000), 1)
	require.ErrorIs(t, err, sluice.ErrKeyTooLong)
	assert.Equal(t, int64(1), l.Stats().Keys, "a rejected key is not tracked")
	require.NoError(t, l.Flush(ctx))
	assert.Equal(t, int64(1), keyTotal(t, srv.Client(t), "sluice", rule, longest))
	name := redisKey("sluice", rule, longest)
	assert.Len(t, name, len("sluice:{len:")+3*sluice.DefaultMaxKeyLength+len("}:6000000"), "escaped bytes take 3")

	// A custom bound counts bytes: 4 two-byte runes are 8 bytes.
	small, err := sluice.New(sluice.Options{MaxKeyLength: 8}, rule)
	require.NoError(t, err)
	t.Cleanup(func() { _ = small.Close() })
	for key, ok := range map[string]bool{"12345678": true, "123456789": false, "éééé": true, "ééééé": false, "": true} {
		_, err := small.Allow(ctx, rule.Name, key)
		if ok {
			assert.NoError(t, err, "%q", key)
		} else {
			assert.ErrorIs(t, err, sluice.ErrKeyTooLong, "%q", key)
		}
	}
	_, err = sluice.New(sluice.Options{MaxKeyLength: -1}, rule)
	assert.ErrorIs(t, err, sluice.ErrInvalidOptions)
}

// hostileKeys are keys whose bytes could break the Redis key layout
// ("<prefix>:{<rule>:<key>}:<sub>"): braces that would move the hash tag,
// colons and separators, whitespace and control bytes, invalid UTF-8, glob
// characters, and pairs that a naive escaping would merge (a raw byte and its
// percent-encoding).
func hostileKeys() []string {
	return []string{
		"{", "}", "{}", "}{", "a{b}c", "{tag}", "a}:{b", "x}:6000000",
		":", "a:b", "a%3Ab", "a%3ab", "%", "%25", "%%", "a{b", "a%7Bb",
		"\n", "a\nb", "a\r\nb", " ", "a b", "\t", "\x00", "a\x00b", "\x7f",
		"\xff", "\xfe\xff", "\xc3\x28", "é", "\xe2\x82", "日本",
		"*", "?", "[a-z]", "sluice:instances", "", "\\", "\"'`",
	}
}

// TestHostileKeys admits each hostile key a different number of times on
// real Redis and checks, from what Redis holds, that the bytes cannot
// collide two keys or escape the layout: every key is its own hash with its
// own count, every Redis key starts with the prefix, holds exactly one '{'
// and one '}' (one hash tag, "<rule>:<encoded key>"), and the registry is
// untouched.
func TestHostileKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	direct := srv.Client(t)
	rule := policy.Rule{Name: "api", Limit: 1000, Window: time.Minute}
	const prefix = "hostile"
	l, err := sluice.New(sluice.Options{Redis: srv.Client(t), Prefix: prefix, ErrorBudget: 1}, rule)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	keys := hostileKeys()
	seen := map[string]bool{}
	for i, k := range keys {
		require.False(t, seen[k], "duplicate test key %q", k)
		seen[k] = true
		d, err := l.AllowN(ctx, rule.Name, k, int64(i+1))
		require.NoError(t, err, "%q", k)
		require.True(t, d.Allowed, "%q", k)
	}
	require.NoError(t, l.Flush(ctx))

	var all []string
	iter := direct.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		all = append(all, iter.Val())
	}
	require.NoError(t, iter.Err())
	assert.Len(t, all, len(keys)+2, "one hash per key, plus the registry and the bulk marker: no two keys share a hash")
	for _, name := range all {
		require.True(t, strings.HasPrefix(name, prefix+":"), "%q escapes the prefix", name)
		if name == prefix+":instances" {
			continue
		}
		if strings.HasPrefix(name, prefix+":bulk:") {
			typ, err := direct.Type(ctx, name).Result()
			require.NoError(t, err)
			assert.Equal(t, "string", typ, "the bulk marker holds a sequence number")
			continue
		}
		assert.Equal(t, 1, strings.Count(name, "{"), "%q: one '{'", name)
		assert.Equal(t, 1, strings.Count(name, "}"), "%q: one '}'", name)
		assert.True(t, strings.HasPrefix(name, prefix+":{"+rule.Name+":"), "%q", name)
		assert.NotContains(t, name, "\n")
	}
	for i, k := range keys {
		assert.Equal(t, int64(i+1), keyTotal(t, direct, prefix, rule, k), "%q has its own count", k)
	}
	typ, err := direct.Type(ctx, prefix+":instances").Result()
	require.NoError(t, err)
	assert.Equal(t, "zset", typ, "the registry is untouched")

	// A prefix or rule name with such bytes is refused up front.
	for _, p := range []string{"a{b", "a}", "a b", "a\n", "é", strings.Repeat("p", 65)} {
		_, err := sluice.New(sluice.Options{Redis: direct, Prefix: p}, rule)
		assert.ErrorIs(t, err, sluice.ErrInvalidOptions, "prefix %q", p)
	}
	for _, name := range []string{"a{b", "a:b", "a b", "a\nb"} {
		_, err := sluice.New(sluice.Options{Redis: direct}, policy.Rule{Name: name, Limit: 1, Window: time.Second})
		assert.ErrorIs(t, err, policy.ErrInvalidRule, "rule name %q", name)
	}
}
