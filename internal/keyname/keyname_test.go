package keyname

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// safeDoc is the set of bytes Encode documents as kept as they are.
const safeDoc = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~@+=/,;!*'()$&|^[]<>#?"

// decodeKey reverses Encode: it fails on anything Encode cannot have
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

// checkEncoding asserts everything Encode promises for key.
func checkEncoding(t *testing.T, key string) {
	t.Helper()
	enc := Encode(nil, key)
	for _, c := range enc {
		if c >= 0x80 || c < 0x20 || c == 0x7f || c == ' ' || c == '{' || c == '}' || c == ':' ||
			!(c == '%' || strings.IndexByte(safeDoc, c) >= 0) {
			t.Fatalf("Encode(%q) = %q holds byte %#x", key, enc, c)
		}
	}
	dec, ok := decodeKey(enc)
	if !ok || dec != key {
		t.Fatalf("Encode(%q) = %q decodes to %q (ok=%v)", key, enc, dec, ok)
	}
	// Appending keeps what dst held.
	pre := []byte("t:{r:")
	if got := Encode(pre, key); !bytes.Equal(got, append([]byte("t:{r:"), enc...)) {
		t.Fatalf("Encode(%q, %q) = %q", pre, key, got)
	}
}

func TestEncode(t *testing.T) {
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
		assert.Equal(t, tc.want, string(Encode(nil, tc.key)), "Encode(%q)", tc.key)
		checkEncoding(t, tc.key)
	}
	// Every single byte.
	for b := 0; b < 256; b++ {
		key := string([]byte{byte(b)})
		enc := string(Encode(nil, key))
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
		enc := string(Encode(nil, k))
		if other, dup := seen[enc]; dup {
			t.Errorf("%q and %q both encode to %q", k, other, enc)
		}
		seen[enc] = k
	}
}

func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "user:1", "{a}", "%", "%25", "a b", "é", "\x00\xff", safeDoc, "}:{", "%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		checkEncoding(t, key)
	})
}
