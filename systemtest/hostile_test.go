package systemtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

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
// and one '}' (one hash tag, "<rule>:<encoded key>"; the epoch's is the
// registry's name), and the registry is untouched.
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
	assert.Len(t, all, len(keys)+3, "one hash per key, plus the registry, its epoch and the bulk marker: no two keys share a hash")
	for _, name := range all {
		require.True(t, strings.HasPrefix(name, prefix+":"), "%q escapes the prefix", name)
		if name == prefix+":instances" {
			continue
		}
		if name == prefix+":epoch{"+prefix+":instances}" {
			typ, err := direct.Type(ctx, name).Result()
			require.NoError(t, err)
			assert.Equal(t, "string", typ, "the store's epoch")
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
