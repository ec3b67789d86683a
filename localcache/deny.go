package localcache

import "time"

// A denial of cost 1 is cached in the room word: the denyFlag bit and the
// retry time in µs, modulo 2^39, fill the word's whole field (word.go).
// Until then every cost is denied (nothing can be admitted to the key in its
// bucket, and only a Settle or SetLimits, which store a new room word or bump
// the tag, change that), so Allow's fast path can deny without the slow
// path, against the time Tick publishes in µs (no division per check). A
// deny path no slower than the allow path keeps a flood of denied requests
// cheap.
const (
	denyFlag  = 1 << 39
	denyMask  = denyFlag - 1
	denyLimit = 1 << 37 // µs: only retry times well inside the modulus are cached
)

func (t *Table) cacheDenial(e *hdr, tag, now int64, retryAfter time.Duration) {
	us := (int64(retryAfter) + 999) / 1000
	if retryAfter <= 0 || us >= denyLimit {
		return
	}
	e.room.Store(pack(tag, 0) | denyFlag | uint64(now/1000+us)&denyMask)
}

// roomOf returns the room in room word rw (0 while it caches a denial).
func roomOf(rw uint64) int64 {
	if rw&denyFlag == 0 {
		return countOf(rw)
	}
	return 0
}

// cachedDenial returns how long a cached denial in room word rw still holds
// at nowUs (the time in µs, as cacheDenial divides it), or 0.
func cachedDenial(rw uint64, nowUs int64) time.Duration {
	c := int64(rw & fieldMask)
	if c&denyFlag == 0 {
		return 0
	}
	d := (c - nowUs) & denyMask // µs until the retry time, modulo 2^39
	if d == 0 || d >= denyLimit {
		return 0 // reached, or long past
	}
	return time.Duration(d) * time.Microsecond
}
