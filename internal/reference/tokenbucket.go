package reference

import (
	"time"

	"github.com/sluicehq/sluice/window"
)

// TokenBucket is the classic token bucket: a level of tokens refilled
// continuously at one token per emission interval T = Window/Limit, capped at
// Burst; cost n is admitted when the bucket holds at least n tokens, and
// takes them. It is a small value, safe to copy; its methods are pure.
//
// The state is two numbers, Tokens. The level is kept in token-nanoseconds
// (tokens × T), so that refilling adds the elapsed nanoseconds and every
// step is exact integer arithmetic, with the same T as window.GCRA.
//
// It admits exactly what window.GCRA admits: with TAT = At + τ − Level (τ = Burst·T)
// the two states describe the same bucket, and both tests read "the debt
// plus n·T fits in τ". The property tests check it on random arrival
// sequences. sluice keeps a TokenBucket rule's keys on the GCRA state (one
// atomic word per key, see package localcache); this type is the textbook
// formulation that the GCRA is measured against. Times passed to it must not
// decrease (a time before the state's is decided at the state's time).
type TokenBucket struct {
	g window.GCRA
}

// Tokens is the state of one key of a TokenBucket.
type Tokens struct {
	// Level is the tokens held at At, times T (token-nanoseconds): from 0 to
	// Burst·T.
	Level int64
	// At is the time of Level, in ns.
	At int64
}

// NewTokenBucket returns the token bucket of limit units per window with
// capacity burst (0 means limit); it panics where window.NewGCRA does.
func NewTokenBucket(w time.Duration, limit, burst int64) TokenBucket {
	return TokenBucket{g: window.NewGCRA(w, limit, burst)}
}

// Full returns the state of a full bucket at t: what a key never seen has.
func (b TokenBucket) Full(t int64) Tokens { return Tokens{Level: b.g.Tolerance(), At: t} }

// Refill returns s brought forward to t: the elapsed time added to the
// level, capped at Burst·T. A t before s.At leaves s as it is.
func (b TokenBucket) Refill(s Tokens, t int64) Tokens {
	if t <= s.At {
		return s
	}
	if el := uint64(t) - uint64(s.At); el >= uint64(b.g.Tolerance()-s.Level) {
		return Tokens{Level: b.g.Tolerance(), At: t}
	}
	return Tokens{Level: s.Level + (t - s.At), At: t}
}

// Admit decides cost n at t: it returns the state after taking n tokens and
// true if the bucket holds them, and s and false if not.
func (b TokenBucket) Admit(s Tokens, t, n int64) (Tokens, bool) {
	if n < 0 || n > b.g.Burst() {
		return s, false
	}
	r := b.Refill(s, t)
	if r.Level < n*b.g.Interval() {
		return s, false
	}
	r.Level -= n * b.g.Interval()
	return r, true
}

// Remaining returns the whole tokens held at t.
func (b TokenBucket) Remaining(s Tokens, t int64) int64 {
	return b.Refill(s, t).Level / b.g.Interval()
}

// RetryAfter returns how long from t until the bucket holds n tokens if
// nothing else is taken: 0 if it does at t, -1 if it never will
// (n > Burst).
func (b TokenBucket) RetryAfter(s Tokens, t, n int64) time.Duration {
	if n < 0 || n > b.g.Burst() {
		return -1
	}
	r := b.Refill(s, t)
	return time.Duration(max(n*b.g.Interval()-r.Level, 0))
}
