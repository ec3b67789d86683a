package syncer

// EncodeKey appends key to dst so that it can sit inside a Redis key without
// changing its structure: bytes other than ASCII letters, digits and
// "-._~@+=/,;!*'()$&|^[]<>#?" become %XX. The encoding is injective ('%'
// itself is always encoded), so two keys never share a Redis key, and the
// result holds no '{', '}', ':', whitespace, control byte or non-ASCII byte.
func EncodeKey(dst []byte, key string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(key); i++ {
		c := key[i]
		if safe[c] {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hex[c>>4], hex[c&15])
	}
	return dst
}

var safe = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~@+=/,;!*'()$&|^[]<>#?" {
		t[c] = true
	}
	return t
}()
