// Package window is the counting math of sluice.
//
// This package is sluice's machinery, not its API: it exports what sluice's
// other packages (and their tests) use of it, with no compatibility promise.
// Programs import package sluice (and policy, httplimit).
//
// It holds sliding-window counters with sub-windows, fixed windows, the one
// admit test (Estimate.Room), and the buckets: GCRA (gcra.go) and Guava's
// warm-up (warmup.go). Pure, no I/O, time passed in. It imports policy for
// the Period type only, so that a calendar quota has one unit from the
// policy file to its Redis keys. The reference models
// measured against this math (a window counter on plain integers, the exact
// sliding log, the classic token bucket the GCRA is proven equal to) are in
// sluice's internal/reference. This file holds the windows; the rest of
// this comment is theirs.
//
// Time is an int64 count of nanoseconds on the store's clock. A window of
// length W is cut into B sub-windows (buckets) of length w = W/B; bucket j
// covers [j·w, (j+1)·w). At time t, with k = ⌊t/w⌋ the current bucket and
// φ = (t − k·w)/w ∈ [0, 1) the phase inside it, the real window (t−W, t]
// starts inside bucket k−B and overlaps buckets k−B … k.
//
// The sliding window (NewSliding, the default) counts all of them whole:
//
//	E(t) = c[k] + c[k−1] + … + c[k−B+1] + c[k−B]
//
// Every event inside the real window is in one of those buckets, so
// E(t) ≥ exact(t), the events in (t−W, t]: a limiter that admits while
// E + n ≤ L never admits more than L in any interval of length W, whatever
// the traffic. The price is the part of bucket k−B already outside the
// window, counted until bucket k ends: E(t) ≤ exact(t) + c[k−B]. Saturated
// traffic therefore gets at least B/(B+1) of L per window (90.9 % at the
// default B = 10; every bucket admits what the bucket B+1 earlier freed),
// and a key whose traffic is spread evenly at rate r per window is never
// denied while r·(1 + 1/B) ≤ L: at B ≥ 10 every key offered at most 0.9·L
// per window at a steady rate passes.
//
// The weighted sliding window (NewWeighted, Cloudflare's estimate) counts
// the oldest bucket only by the fraction of it still inside the window, as
// if its events were spread evenly:
//
//	E(t) = c[k] + c[k−1] + … + c[k−B+1] + (1 − φ)·c[k−B]
//
// With B = 1 this is the classic "current plus weighted previous window".
// If x of the c[k−B] events are still inside the window,
// exact = E(t) − (1−φ)·c[k−B] + x, so
//
//	E(t) − (1−φ)·c[k−B] ≤ exact ≤ E(t) + φ·c[k−B]
//
// A limiter that admits while E + n ≤ L can therefore pass up to φ·c[k−B]
// more than L in a real window, and can deny up to (1−φ)·c[k−B] early. When
// no bucket holds more than about L/B (traffic spread over the window) that
// is one sub-window's worth, L/B. A burst that fills the limit at once — a
// cold start, a retry storm — lands at some phase of a bucket, and the decay
// then frees room while those events are still inside the window; an
// adversary who packs L into the very end of one bucket and sends again
// just before the end of the bucket B later reaches nearly 2L for any B.
// docs/accuracy-algorithms.md measures both.
//
// A fixed window (B = 1, no weighting) estimates E(t) = c[k]: exact inside the
// window, but 2L can pass in a span of W straddling a boundary.
//
// A calendar quota (NewCalendar) is a fixed window whose bucket k is
// period k of a calendar (calendar.go), a day, week or month of a time
// zone, of the calendar's length rather than w: the bucket of t, its
// phase and the time it ends come from the calendar; the rest is a fixed
// window's.
package window

import (
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// Sliding is the geometry of a sliding-window (or fixed-window) counter: the
// sub-window length and count, and how the oldest bucket counts. It is a
// small value, safe to copy.
type Sliding struct {
	sub      int64 // sub-window length, ns
	buckets  int
	fixed    bool
	weighted bool      // the oldest bucket counts by its overlap 1−φ
	cal      *calendar // a calendar quota's periods (NewCalendar); nil: sub-windows of sub
}

// NewSliding returns the geometry of a sliding window of length window cut into
// buckets sub-windows, whose oldest bucket counts whole: no interval of
// length window ever holds more than the limit. It panics if window is not
// positive or not a multiple of buckets nanoseconds; callers validate rules
// first (policy.Rule.Validate).
func NewSliding(window time.Duration, buckets int) Sliding {
	return newGeometry(window, buckets, false, false)
}

// NewWeighted returns the geometry of a weighted sliding window (the
// estimate Cloudflare describes): as NewSliding, but the oldest bucket
// counts only by the fraction 1−φ of it still inside the window. It admits
// a little more on evenly spread traffic and can exceed the limit in a real
// interval (see the package doc).
func NewWeighted(window time.Duration, buckets int) Sliding {
	return newGeometry(window, buckets, false, true)
}

// NewFixed returns the geometry of a fixed window of length window.
func NewFixed(window time.Duration) Sliding {
	return newGeometry(window, 1, true, false)
}

// Period returns the period and the time zone of a calendar quota's
// geometry (NewCalendar), and the zero Period and nil for the others.
func (s Sliding) Period() (policy.Period, *time.Location) {
	if s.cal == nil {
		return 0, nil
	}
	return s.cal.unit, s.cal.loc
}

// Start returns the start of bucket j: j·w, or a calendar period's start.
func (s Sliding) Start(j int64) int64 {
	if s.cal != nil {
		return s.cal.start(j)
	}
	return j * s.sub
}

func newGeometry(window time.Duration, buckets int, fixed, weighted bool) Sliding {
	if window <= 0 || buckets < 1 || int64(window)%int64(buckets) != 0 {
		panic(fmt.Sprintf("window: bad geometry %v / %d", window, buckets))
	}
	return Sliding{sub: int64(window) / int64(buckets), buckets: buckets, fixed: fixed, weighted: weighted}
}

// Buckets returns B, the number of sub-windows per window.
func (s Sliding) Buckets() int { return s.buckets }

// Weighted reports whether the oldest bucket counts by its overlap with the
// window (NewWeighted) rather than whole.
func (s Sliding) Weighted() bool { return s.weighted }

// Sub returns w, the length of one sub-window, in nanoseconds.
func (s Sliding) Sub() int64 { return s.sub }

// Window returns W = B·w.
func (s Sliding) Window() time.Duration { return time.Duration(s.sub * int64(s.buckets)) }

// Span returns the number of buckets that hold counts inside a window: B+1 for
// a sliding window (the newest B and the partly overlapping oldest), 1 for a
// fixed one.
func (s Sliding) Span() int {
	if s.fixed {
		return 1
	}
	return s.buckets + 1
}

// Index returns k = ⌊t/w⌋, the bucket that holds time t (floor division, so
// negative times work too); for a calendar geometry, the period of t.
func (s Sliding) Index(t int64) int64 {
	if s.cal == nil && t >= 0 {
		return t / s.sub // the common case, inlined at the caller
	}
	return s.index(t)
}

// index is Index for a calendar geometry or a time before the epoch.
func (s Sliding) index(t int64) int64 {
	if s.cal != nil {
		return s.cal.index(t)
	}
	k := t / s.sub
	if t%s.sub < 0 {
		k--
	}
	return k
}

// Phase returns φ ∈ [0, 1), how far t is into its bucket.
func (s Sliding) Phase(t int64) float64 {
	if s.cal != nil {
		start, end := s.cal.bounds(s.cal.index(t))
		return float64(t-start) / float64(end-start)
	}
	return float64(t-s.Index(t)*s.sub) / float64(s.sub)
}

// oldest returns the index of the oldest bucket that still counts at bucket k:
// k−B for a sliding window, k for a fixed one (k − Span() + 1).
func (s Sliding) oldest(k int64) int64 {
	if s.fixed {
		return k
	}
	return k - int64(s.buckets)
}

// OldWeight returns the weight of the oldest bucket at phase φ: 1−φ for a
// weighted sliding window, 1 otherwise (the oldest bucket counts whole; a
// fixed window's only bucket too).
func (s Sliding) OldWeight(phase float64) float64 {
	if !s.weighted {
		return 1
	}
	return 1 - phase
}

// Parts returns E(t) for the counts count(j) of buckets j, in its two parts
// (Estimate; Value is E(t)): the buckets counted whole, and the weighted
// oldest one. count is called for the Span() buckets from k − Span() + 1 to
// k = Index(t).
func (s Sliding) Parts(t int64, count func(j int64) int64) Estimate {
	k := s.Index(t)
	old := s.oldest(k)
	if s.fixed {
		return Estimate{Whole: count(k)}
	}
	var e Estimate
	for j := old + 1; j <= k; j++ {
		e.Whole += count(j)
	}
	if !s.weighted {
		e.Whole += count(old)
		return e
	}
	e.Weighted = float64(count(old)) * s.OldWeight(s.Phase(t))
	return e
}

// ResetAfter returns how long until the window no longer holds anything
// counted at time t: the end of the window for a fixed window, and for a
// sliding window the moment bucket ⌊t/w⌋ has fully left it, (k+B+1)·w − t.
// It is the ResetAfter of an admission at t; a check that admits nothing
// resets when the newest bucket holding a count leaves (leaves).
func (s Sliding) ResetAfter(t int64) time.Duration {
	return time.Duration(s.leaves(s.Index(t)) - t)
}

// leaves returns the time at which bucket j's counts have left the
// estimate: (j+1)·w for a fixed window (its only bucket ends), (j+B+1)·w
// for a sliding or weighted one (the bucket was the oldest, weighted down
// to 0 for a weighted window, for its last sub-window). The window holds
// nothing counted in bucket j or before from then on: the time a key whose
// newest count is in bucket j is whole again, which does not move while
// nothing more is counted.
func (s Sliding) leaves(j int64) int64 {
	if s.cal != nil {
		_, end := s.cal.bounds(j)
		return end
	}
	if s.fixed {
		return (j + 1) * s.sub
	}
	return (j + int64(s.buckets) + 1) * s.sub
}

// ResetAt returns how long from t until the estimate holds none of the
// counts of the Span() buckets up to ⌊t/w⌋ (count gives them, as for
// Parts): until the newest bucket with a count leaves (leaves), 0 if
// none has one. While nothing more is counted, t+ResetAt(t) never moves
// later.
func (s Sliding) ResetAt(t int64, count func(j int64) int64) time.Duration {
	k := s.Index(t)
	for j := k; j >= s.oldest(k); j-- {
		if count(j) > 0 {
			return time.Duration(max(s.leaves(j)-t, 0))
		}
	}
	return 0
}

const (
	// roundingSteps bounds the nanosecond steps RetryAfter takes to correct
	// the float rounding of its solved time.
	roundingSteps = 4
	// stackBuckets is the largest B whose counts RetryAfter copies without
	// allocating (policy.MaxPrecision).
	stackBuckets = 64
)

// RetryAfter returns how long from t until E falls to limit−n or below, if
// nothing more is admitted: 0 if it already has, and -1 if it never will
// (n > limit). count gives the bucket counts as for Parts.
func (s Sliding) RetryAfter(t int64, limit, n int64, count func(j int64) int64) time.Duration {
	if n > limit {
		return -1
	}
	// Read the Span() counts once, so that every estimate below sees one
	// snapshot even if count changes under us; later buckets get no new
	// counts.
	k := s.Index(t)
	oldest := s.oldest(k)
	var buf [stackBuckets + 1]int64
	c := buf[:0]
	if s.Span() > len(buf) {
		c = make([]int64, 0, s.Span())
	}
	for j := oldest; j <= k; j++ {
		c = append(c, count(j))
	}
	snap := func(j int64) int64 {
		if i := j - oldest; i >= 0 && i < int64(len(c)) {
			return c[i]
		}
		return 0
	}
	// fits reports whether a limiter would admit n at t+d: the admit test
	// on the same estimate, so that 0 is returned if and only if n is
	// admitted at t, and t+RetryAfter is the first nanosecond at which it is.
	fits := func(d int64) bool { return n <= s.Parts(t+d, snap).Room(limit) }
	if fits(0) {
		return 0
	}
	if s.fixed {
		return time.Duration(s.leaves(k) - t)
	}
	b := int64(s.buckets)
	if !s.weighted {
		// The estimate only changes at bucket boundaries, when the oldest
		// bucket leaves it whole: at the start of bucket m it is the sum of
		// c[m−B..k], the sum at t less the buckets that have left.
		var e Estimate
		for _, v := range c {
			e.Whole += v
		}
		for m := k + 1; m <= k+b; m++ {
			e.Whole -= snap(m - b - 1)
			if n <= e.Room(limit) {
				return time.Duration(m*s.sub - t)
			}
		}
		return time.Duration((k+b+1)*s.sub - t)
	}
	// Walk bucket boundaries forward: in bucket m (m ≥ k) with phase ψ the
	// estimate is full(m) + (1−ψ)·c[m−B], where full(m) sums c[m−B+1..k].
	// n fits once the weighted share is at most limit−n−full plus the admit
	// test's tolerance; the solved time is corrected against fits below.
	room := float64(limit-n) + tolerance
	full := 0.0
	for j := k - b + 1; j <= k; j++ {
		full += float64(snap(j))
	}
	for m := k; m <= k+b; m++ {
		old := float64(snap(m - b))
		if full <= room {
			// E reaches room in bucket m: solve full + (1−ψ)·old = room for
			// ψ, then correct the float rounding of ψ·w (a nanosecond or
			// so either way). E is non-increasing inside the bucket and
			// full(m) ≤ room at its end, so the end is a safe fallback.
			d := m*s.sub - t
			if old > 0 {
				d += int64(math.Ceil((1 - (room-full)/old) * float64(s.sub)))
			}
			end := (m+1)*s.sub - t
			d = min(max(d, 1), end)
			for i := 0; d < end && !fits(d); i++ {
				if i == roundingSteps {
					return time.Duration(end)
				}
				d++
			}
			for i := 0; i < roundingSteps && d > 1 && fits(d-1); i++ {
				d--
			}
			return time.Duration(d)
		}
		full -= float64(snap(m - b + 1))
	}
	return time.Duration((k+b+1)*s.sub - t)
}
