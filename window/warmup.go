package window

import (
	"fmt"
	"math"
	"time"
)

// WarmUp is a GCRA whose rate ramps up after idling: Guava's
// SmoothRateLimiter.SmoothWarmingUp (cold factor 3), decided now instead of
// by waiting. It is a small value, safe to copy; its methods are pure.
//
// # Guava's model
//
// With the stable interval T = Window/Limit, the warm-up period P and cold
// factor 3, a key stores "cold" permits s between 0 and
//
//	maxPermits = thresholdPermits + 2·P/(T + 3T),  thresholdPermits = P/(2T)
//
// (so maxPermits = P/T). Idle time adds stored permits, one per cool-down
// interval P/maxPermits (= T), up to maxPermits: an idle key goes cold.
// Taking k of them costs the area under the interval function
//
//	interval(x) = T                              for x ≤ thresholdPermits,
//	interval(x) = T + slope·(x − thresholdPermits) above, slope = 2T/(maxPermits − thresholdPermits),
//
// between s−k and s (storedPermitsToWaitTime): from T per permit when warm
// up to 3T when fully cold; permits beyond the stored ones cost T each. A
// key fully cold therefore needs P of saturated use to reach the stable
// rate. Guava keeps the time at which the next request may be served, next,
// and a request of n pushes it by that cost (the wait, truncated to whole
// µs); a request is served when next has come.
//
// The state here is Guava's, in Guava's units: Warm{Next in µs, Stored}. A
// key never seen is fully cold (stored = maxPermits), as a new Guava
// SmoothWarmingUp is.
//
// # Deciding now, with a burst
//
// sluice decides at once instead of sleeping, and its TokenBucket and GCRA
// rules have a capacity, Burst. The admission test is the GCRA's on the
// stable part of the cost, in advance:
//
//	max(next − t, 0) + n·T ≤ Burst·T
//
// and an admitted request moves next as Guava would (resync, then the whole
// cost: n·T plus the warm-up surcharge). The surcharge is thus paid in
// arrears, as Guava charges every cost: a cold key still admits its first
// request at once, and what it admits after that shrinks by the surcharge.
// For unit costs this is exactly Guava's tryAcquire(1, (Burst−1)·T); with
// Burst 1, Guava's tryAcquire() without a timeout. A warm key (stored
// permits at or below the threshold) pays no surcharge: the test and the
// update are the GCRA's, to within Guava's µs truncation. A fully cold key
// admits about Burst/3 units at once (each costs up to 3T) and then one per
// 3T, ramping to Burst and one per T over P of saturated use.
//
// Times are passed in ns and truncated to µs, Guava's clock; Check's
// RetryAfter is exact on that clock (denied at t+RetryAfter−1ns, admitted at
// t+RetryAfter).
type WarmUp struct {
	stable    float64 // T, µs (Guava's stableIntervalMicros)
	warmup    int64   // P, µs (warmupPeriodMicros)
	burst     int64
	threshold float64 // thresholdPermits
	maxP      float64 // maxPermits
	slope     float64
	cool      float64 // coolDownIntervalMicros
	inv       float64 // 1/T: an estimate of Remaining, settled exactly by fits
	whole     uint64  // T when it is whole and Burst·T < 2^51, else 0: Remaining in integers
}

// Warm is the state of one key of a WarmUp: Guava's nextFreeTicketMicros
// and storedPermits.
type Warm struct {
	// Next is when the next request may be served without debt, in µs.
	Next int64
	// Stored is the stored (cold) permits, from 0 to MaxPermits.
	Stored float64
}

// ColdFactor is the ratio of the cold interval to the stable one, Guava's
// fixed 3.
const ColdFactor = 3

// NewWarmUp returns the warm-up GCRA of limit units per window, capacity
// burst (0 means limit), warming up over warmup. It panics if the interval
// is under 1µs or warmup is under 1µs; callers validate rules first
// (policy.Rule.Validate).
func NewWarmUp(window, warmup time.Duration, limit, burst int64) WarmUp {
	if burst == 0 {
		burst = limit
	}
	stable := float64(window) / 1e3 / float64(limit)
	p := int64(warmup / time.Microsecond)
	if window <= 0 || limit < 1 || burst < 1 || !(stable >= 1) || p < 1 {
		panic(fmt.Sprintf("window: bad warm-up %v / %d over %v, burst %d", window, limit, warmup, burst))
	}
	w := WarmUp{stable: stable, warmup: p, burst: burst}
	cold := stable * ColdFactor
	w.threshold = 0.5 * float64(p) / stable
	w.maxP = w.threshold + 2.0*float64(p)/(stable+cold)
	w.slope = (cold - stable) / (w.maxP - w.threshold)
	w.cool = float64(p) / w.maxP
	w.inv = 1 / stable
	if stable == math.Trunc(stable) && float64(burst)*stable < 1<<51 {
		w.whole = uint64(stable)
	}
	return w
}

// Fresh returns the state of a key never seen, at t (ns): fully cold, no
// debt.
func (w WarmUp) Fresh(t int64) Warm { return Warm{Next: micros(t), Stored: w.maxP} }

// Idle reports whether s at t is the same as Fresh(t): no debt and fully
// cold. Such a key can be forgotten.
func (w WarmUp) Idle(s Warm, t int64) bool {
	now := micros(t)
	return s.Next <= now && w.resync(s, now).Stored >= w.maxP
}

// room returns the most debt, in µs, with which cost n is admitted:
// ⌊(Burst − n)·T⌋.
func (w WarmUp) room(n int64) int64 {
	return int64(math.Floor(float64(w.burst-n) * w.stable))
}

// fits reports whether cost n is admitted with debt (µs): debt ≤ room(n),
// compared without the floor (the same for a whole debt).
func (w WarmUp) fits(debt, n int64) bool {
	return float64(debt) <= float64(w.burst-n)*w.stable
}

// take is an admission of n at now (µs): Guava's reserveEarliestAvailable.
func (w WarmUp) take(s Warm, now, n int64) Warm {
	r := w.resync(s, now)
	take := min(float64(n), r.Stored)
	wait := w.waitMicros(r.Stored, take) + int64((float64(n)-take)*w.stable)
	r.Next += wait
	r.Stored -= take
	return r
}

// Check decides cost n at t (ns) on s, and reports it as a limiter does, in
// one pass over the state: the new state (s if denied) and whether n is
// admitted; then, after the check, the largest cost admitted at t and the
// time until no debt; and for a denial the RetryAfter: how long from t
// until n is admitted if nothing else is (-1 if it never is, n > Burst).
func (w WarmUp) Check(s Warm, t, n int64) (next Warm, ok bool, remaining int64, reset, retry time.Duration) {
	now := micros(t)
	debt := debtMicros(s.Next, now)
	switch {
	case n < 0 || n > w.burst:
		return s, false, w.remaining(debt), w.reset(now, debt, t), -1
	case !w.fits(debt, n):
		return s, false, w.remaining(debt), w.reset(now, debt, t), w.retry(now, debt, t, n)
	}
	next = w.take(s, now, n)
	debt = next.Next - now // resync brought Next up to now at least
	return next, true, w.remaining(debt), w.reset(now, debt, t), 0
}

// resync is Guava's: idle time since Next becomes stored permits, and Next
// comes up to now.
func (w WarmUp) resync(s Warm, now int64) Warm {
	if now > s.Next {
		s.Stored = min(w.maxP, s.Stored+float64(now-s.Next)/w.cool)
		s.Next = now
	}
	return s
}

// waitMicros is Guava's storedPermitsToWaitTime: the µs that taking take of
// stored permits costs, the area under the interval function between
// stored−take and stored, each of its two parts truncated to whole µs.
func (w WarmUp) waitMicros(stored, take float64) int64 {
	var us int64
	if above := stored - w.threshold; above > 0 {
		k := min(above, take)
		// The trapezoid between above−k and above (counted from the
		// threshold): its mean height times its width.
		hi := w.stable + above*w.slope
		lo := w.stable + (above-k)*w.slope
		us = int64(k * (hi + lo) / 2.0)
		take -= k
	}
	return us + int64(w.stable*take)
}

// retry is the RetryAfter of Check for a debt (µs) at now (µs, t in ns).
func (w WarmUp) retry(now, debt, t, n int64) time.Duration {
	d := debt - w.room(n)
	if d <= 0 {
		return 0
	}
	return time.Duration((now+d)*1000 - t)
}

// ResetAfter returns how long from t until s carries no debt: Next, or 0
// if it has passed. (Coldness is not capacity: an idle key's stored permits
// grow, but it admits its full Burst again as soon as it has no debt.)
func (w WarmUp) ResetAfter(s Warm, t int64) time.Duration {
	now := micros(t)
	return w.reset(now, debtMicros(s.Next, now), t)
}

// reset is ResetAfter for a debt (µs) at now (µs, t in ns).
func (w WarmUp) reset(now, debt, t int64) time.Duration {
	if debt > 0 {
		return time.Duration((now+debt)*1000 - t)
	}
	return 0
}

// maxDebt saturates debtMicros far beyond any debt a valid rule reaches
// (policy.Rule.Validate bounds Burst·T by a day), so that no sum with it
// overflows.
const maxDebt = 1 << 50

// debtMicros returns max(next − now, 0), saturated at maxDebt.
func debtMicros(next, now int64) int64 {
	if next <= now {
		return 0
	}
	return int64(min(uint64(next)-uint64(now), maxDebt))
}

// Remaining returns the largest cost admitted at t: the largest n ≤ Burst
// with max(Next − t, 0) ≤ ⌊(Burst − n)·T⌋, or 0.
func (w WarmUp) Remaining(s Warm, t int64) int64 {
	return w.remaining(debtMicros(s.Next, micros(t)))
}

// remaining is Remaining for a debt (µs), at least 0.
//
// When T is a whole number of µs (w.whole) and Burst·T < 2^51, every
// product (Burst − n)·T that fits compares with is an integer a float64
// holds exactly, and so is every debt remaining is asked about (at most
// maxDebt before a check; after an admission at most the room, Burst·T,
// plus its cost, at most 3T per unit): fits(debt, n) is then the integer
// test debt ≤ (Burst − n)·T, and the largest such n is Burst − ⌈debt/T⌉,
// one integer division instead of the float estimate and its settling.
func (w WarmUp) remaining(debt int64) int64 {
	if w.whole > 0 {
		return wholeRemaining(w.burst, w.whole, debt)
	}
	return w.remainingFloat(debt)
}

// wholeRemaining is remaining's integer path: max(burst − ⌈debt/t⌉, 0).
func wholeRemaining(burst int64, t uint64, debt int64) int64 {
	return max(burst-int64((uint64(debt)+t-1)/t), 0)
}

// remainingFloat is remaining for any T: an estimate from 1/T, settled on
// the exact predicate fits.
func (w WarmUp) remainingFloat(debt int64) int64 {
	n := w.burst - int64(math.Ceil(float64(debt)*w.inv))
	// The estimate can be an ulp off either way: settle on the exact
	// predicate.
	for n < w.burst && w.fits(debt, n+1) {
		n++
	}
	for n > 0 && !w.fits(debt, n) {
		n--
	}
	return max(n, 0)
}

// micros returns t (ns) in whole µs, rounded down (negative times too).
func micros(t int64) int64 {
	u := t / 1000
	if t%1000 < 0 {
		u--
	}
	return u
}
