package syncer

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/window"
)

// dummyClient satisfies New; KeyName never uses it.
var dummyClient redis.UniversalClient = (*redis.Client)(nil)

// safeDoc is the set of bytes EncodeKey documents as kept as they are.
const safeDoc = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~@+=/,;!*'()$&|^[]<>#?"

// decodeKey reverses EncodeKey: it fails on anything EncodeKey cannot have
// produced (a byte outside the safe set, '%' not followed by two upper-case
// hex digits).
func decodeKey(enc []byte) (string, bool) {
	const hex = "0123456789ABCDEF"
	var out []byte
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if c != '%' {
			if !strings.ContainsRune(safeDoc, rune(c)) {
				return "", false
			}
			out = append(out, c)
			continue
		}
		if i+2 >= len(enc) {
			return "", false
		}
		hi, lo := strings.IndexByte(hex, enc[i+1]), strings.IndexByte(hex, enc[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		b := byte(hi<<4 | lo)
		if strings.ContainsRune(safeDoc, rune(b)) && b < 0x80 {
			return "", false // a safe byte is never escaped: one encoding per key
		}
		out = append(out, b)
		i += 2
	}
	return string(out), true
}

// checkEncoding asserts everything EncodeKey promises for key.
func checkEncoding(t *testing.T, key string) {
	t.Helper()
	enc := EncodeKey(nil, key)
	for _, c := range enc {
		if c >= 0x80 || c < 0x20 || c == 0x7f || c == ' ' || c == '{' || c == '}' || c == ':' ||
			!(c == '%' || strings.IndexByte(safeDoc, c) >= 0) {
			t.Fatalf("EncodeKey(%q) = %q holds byte %#x", key, enc, c)
		}
	}
	dec, ok := decodeKey(enc)
	if !ok || dec != key {
		t.Fatalf("EncodeKey(%q) = %q decodes to %q (ok=%v)", key, enc, dec, ok)
	}
	// Appending keeps what dst held.
	pre := []byte("t:{r:")
	if got := EncodeKey(pre, key); !bytes.Equal(got, append([]byte("t:{r:"), enc...)) {
		t.Fatalf("EncodeKey(%q, %q) = %q", pre, key, got)
	}
}

func TestEncodeKey(t *testing.T) {
	t.Parallel()
	cases := []struct{ key, want string }{
		{"", ""},
		{"user42", "user42"},
		{safeDoc, safeDoc},
		{"a:b", "a%3Ab"},
		{"{tag}", "%7Btag%7D"},
		{"a b\tc\r\n", "a%20b%09c%0D%0A"},
		{"100%", "100%25"},
		{"%3A", "%253A"}, // not confused with an encoded ':'
		{`"\` + "`", "%22%5C%60"},
		{"\x00\x1f\x7f", "%00%1F%7F"},
		{"é", "%C3%A9"},
		{"\xff\x80", "%FF%80"},
		{"日本", "%E6%97%A5%E6%9C%AC"},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, string(EncodeKey(nil, tc.key)), "EncodeKey(%q)", tc.key)
		checkEncoding(t, tc.key)
	}
	// Every single byte.
	for b := 0; b < 256; b++ {
		key := string([]byte{byte(b)})
		enc := string(EncodeKey(nil, key))
		if strings.IndexByte(safeDoc, byte(b)) >= 0 {
			assert.Equal(t, key, enc)
		} else {
			assert.Len(t, enc, 3, "byte %#x", b)
			assert.Equal(t, byte('%'), enc[0])
		}
		checkEncoding(t, key)
	}
	// Keys that differ only in escaping stay apart.
	seen := map[string]string{}
	for _, k := range []string{"a:b", "a%3Ab", "a%253Ab", "a:%3Ab", "a b", "a+b", "a%20b"} {
		enc := string(EncodeKey(nil, k))
		if other, dup := seen[enc]; dup {
			t.Errorf("%q and %q both encode to %q", k, other, enc)
		}
		seen[enc] = k
	}
}

func FuzzEncodeKey(f *testing.F) {
	for _, s := range []string{"", "user:1", "{a}", "%", "%25", "a b", "é", "\x00\xff", safeDoc, "}:{", "%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		checkEncoding(t, key)
	})
}

// noKeys is a Keys that never has a key: naming keys needs a rule, not its
// local state (and a table cannot hold every geometry named here).
type noKeys struct{}

func (noKeys) Drain(dst []handle) []handle                                    { return dst }
func (noKeys) Key(handle) string                                              { return "" }
func (noKeys) Pending(_ handle, _ int64, dst []window.Bucket) []window.Bucket { return dst }
func (noKeys) Settle(handle, int64, []window.Bucket, int64, []int64, window.Bucket) []window.Bucket {
	return nil
}
func (noKeys) Release(handle, int64, int64, bool) (int64, bool) { return 0, true }
func (noKeys) Want(handle, int64, int64) int64                  { return 0 }
func (noKeys) NextWant(handle, int64, int64) int64              { return 0 }
func (noKeys) MarkDirty(handle)                                 {}
func (noKeys) Early(dst []handle) []handle                      { return dst }
func (noKeys) OnEarly(func())                                   {}
func (noKeys) Need(handle, int64) bool                          { return true }
func (noKeys) Park(handle)                                      {}
func (noKeys) Unsynced(dst []handle, _ int64) []handle          { return dst }
func (noKeys) View(_ handle, _ int64, dst []window.Bucket) []window.Bucket {
	return dst
}
func (noKeys) Leased(_ handle, _ int64, dst []window.Bucket) []window.Bucket {
	return dst
}
func (noKeys) Viewed(dst []handle, _ int64) []handle { return dst }

// nameRule returns a rule of no keys, for naming them.
func nameRule(name string, geo window.Sliding) *testRule {
	return &testRule{cfg: syncport.RuleConfig{Name: name, Geometry: geo, Limit: 1, Keys: noKeys{}}}
}

func TestKeyName(t *testing.T) {
	t.Parallel()
	cases := []struct {
		prefix, name string
		geo          window.Sliding
		key, want    string
	}{
		{"t", "api", window.NewSliding(time.Minute, 6), "user:1", "t:{api:user%3A1}:10000000"},
		{"t", "api", window.NewFixed(time.Second), "k", "t:{api:k}:1000000"},
		{"t", "api", window.NewSliding(time.Second, 1), "k", "t:{api:k}:1000000"},
		{"sluice:prod", "login.v2", window.NewSliding(time.Millisecond, 1000), "k", "sluice:prod:{login.v2:k}:1"},
		{"t", "api", window.NewSliding(time.Hour, 60), "", "t:{api:}:60000000"},
		{"t", "api", window.NewSliding(time.Minute, 6), "{evil}:x", "t:{api:%7Bevil%7D%3Ax}:10000000"},
		{"t", "api", window.NewSliding(time.Minute, 6), "a b", "t:{api:a%20b}:10000000"},
	}
	cfg := func(prefix string) Config {
		return Config{Client: dummyClient, Prefix: prefix, InstanceID: "x", Interval: time.Second,
			Timeout: time.Second, Clock: fixedClock(0)}
	}
	for _, tc := range cases {
		r := nameRule(tc.name, tc.geo)
		_, err := newSyncer(cfg(tc.prefix), r)
		require.NoError(t, err)
		got := r.keyName(tc.key)
		assert.Equal(t, tc.want, got)
		assert.Equal(t, tc.name+":"+string(EncodeKey(nil, tc.key)), hashTag(got),
			"the hash tag holds the rule and the key, so one limiter key is one slot")
		assert.Equal(t, 1, strings.Count(got, "{"), "one '{' in %q", got)
		assert.Equal(t, 1, strings.Count(got, "}"), "one '}' in %q", got)
	}

	// The same rule with another geometry (in another syncer: one syncer
	// refuses two rules of one name): another Redis key, same slot.
	r1 := nameRule("api", window.NewSliding(time.Minute, 6))
	r2 := nameRule("api", window.NewSliding(time.Minute, 3))
	_, err := newSyncer(cfg("t"), r1)
	require.NoError(t, err)
	_, err = newSyncer(cfg("t"), r2)
	require.NoError(t, err)
	assert.NotEqual(t, r1.keyName("k"), r2.keyName("k"))
	assert.Equal(t, hashTag(r1.keyName("k")), hashTag(r2.keyName("k")))
}
