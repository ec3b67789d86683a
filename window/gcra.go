package window

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// GCRA is the generic cell rate algorithm: a token bucket kept as one
// timestamp. It is a small value, safe to copy; its methods are pure.
//
// The rate is one unit per emission interval T = Window/Limit, rounded to
// the nearest nanosecond (NewGCRA), and the capacity is Burst units, so the
// tolerance is τ = Burst·T. The state of a key is one time, the theoretical
// arrival time TAT: the moment the key would be back to full capacity. A
// key never seen (or idle since) has TAT ≤ t, which is the full bucket.
//
// The convention: cost n is admitted at time t if and only if
//
//	TAT' − t ≤ τ, where TAT' = max(TAT, t) + n·T,
//
// and then TAT becomes TAT'. A full bucket (TAT ≤ t) admits n if and only if
// n ≤ Burst: exactly Burst units at once, and after that one more every T.
// The debt max(TAT − t, 0) is how much of the tolerance is in use; the
// bucket holds (τ − debt)/T tokens. This is the classic token bucket of
// capacity Burst refilled by one token every T, on one number instead of
// two; see the reference model TokenBucket (sluice's internal/reference) for
// the correspondence.
//
// Everything is exact integer arithmetic on nanoseconds: RetryAfter is the
// first nanosecond at which the same cost is admitted if nothing else is,
// and Remaining the largest cost admitted now. The only rounding is T's: a
// Window that is not a multiple of Limit nanoseconds runs at 1/T instead of
// Limit/Window, a relative error of at most 0.5ns/T (policy.Rule.Validate
// requires T ≥ 1µs, so at most 0.05%).
type GCRA struct {
	interval int64 // T, ns per unit
	burst    int64 // B, units
	tau      int64 // B·T, ns
}

// NewGCRA returns the GCRA of limit units per window with capacity burst
// (burst 0 means limit). It panics if the interval window/limit rounds to
// zero or if burst·T overflows; callers validate rules first
// (policy.Rule.Validate).
func NewGCRA(window time.Duration, limit, burst int64) GCRA {
	if burst == 0 {
		burst = limit
	}
	if window <= 0 || limit < 1 || burst < 1 {
		panic(fmt.Sprintf("window: bad GCRA %v / %d, burst %d", window, limit, burst))
	}
	t := (int64(window) + limit/2) / limit
	hi, tau := bits.Mul64(uint64(burst), uint64(t))
	if t < 1 || hi != 0 || tau > math.MaxInt64/4 {
		panic(fmt.Sprintf("window: GCRA interval %v / %d, burst %d out of range", window, limit, burst))
	}
	return GCRA{interval: t, burst: burst, tau: int64(tau)}
}

// Interval returns T, the emission interval in nanoseconds.
func (g GCRA) Interval() int64 { return g.interval }

// Burst returns the capacity in units.
func (g GCRA) Burst() int64 { return g.burst }

// Tolerance returns τ = Burst·T in nanoseconds: the most debt a key may
// carry after an admission.
func (g GCRA) Tolerance() int64 { return g.tau }

// Admit decides cost n at time t on state tat: it returns the new state and
// true if n is admitted, and tat unchanged and false if not. Any tat is
// valid input: one at or before t is the full bucket.
func (g GCRA) Admit(tat, t, n int64) (int64, bool) {
	if n < 0 || n > g.burst || t > math.MaxInt64-g.tau {
		// The last τ before the largest time admits nothing, so that
		// t + τ never overflows.
		return tat, false
	}
	// TAT' − t = debt + n·T, compared before adding: the debt can be any
	// uint64 for a hostile tat.
	d := g.debt(tat, t)
	if d > uint64(g.tau-n*g.interval) {
		return tat, false
	}
	return t + int64(d) + n*g.interval, true
}

// RetryAfter returns how long from t until cost n is admitted on state tat
// if nothing else is: 0 if it is admitted at t, -1 if it never is
// (n > Burst). Cost n is denied at t+RetryAfter−1ns and admitted at
// t+RetryAfter.
func (g GCRA) RetryAfter(tat, t, n int64) time.Duration {
	if n < 0 || n > g.burst {
		return -1
	}
	// Denied with n ≤ Burst means TAT > t: admitted once TAT + n·T − t' ≤ τ,
	// that is at t' = TAT + n·T − τ, which is still ≤ TAT (n·T ≤ τ), so
	// the max stays TAT up to there.
	d, slack := g.debt(tat, t), uint64(g.tau-n*g.interval)
	if d <= slack {
		return 0
	}
	return saturate(d - slack)
}

// ResetAfter returns how long from t until state tat is back to full
// capacity: the debt max(TAT − t, 0).
func (g GCRA) ResetAfter(tat, t int64) time.Duration {
	return saturate(g.debt(tat, t))
}

// Remaining returns the whole tokens left at t: the largest cost admitted
// at t, ⌊(τ − debt)/T⌋, and 0 if none is.
func (g GCRA) Remaining(tat, t int64) int64 {
	d := g.debt(tat, t)
	if d >= uint64(g.tau) {
		return 0
	}
	return (g.tau - int64(d)) / g.interval
}

// debt returns max(TAT − t, 0), exact for any tat and t.
func (g GCRA) debt(tat, t int64) uint64 {
	if tat <= t {
		return 0
	}
	return uint64(tat) - uint64(t)
}

// saturate returns d as a Duration, at most the largest one.
func saturate(d uint64) time.Duration {
	return time.Duration(min(d, math.MaxInt64))
}
