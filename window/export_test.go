package window

import "time"

// Micros is micros, for the external tests.
var Micros = micros

// WarmAdmit is w.admit, for the external tests.
func WarmAdmit(w WarmUp, s Warm, t, n int64) (Warm, bool) { return w.admit(s, t, n) }

// WarmRetryAfter is w.retryAfter, for the external tests.
func WarmRetryAfter(w WarmUp, s Warm, t, n int64) time.Duration { return w.retryAfter(s, t, n) }

// Fixed reports whether s is a fixed window, for the external tests.
func (s Sliding) Fixed() bool { return s.fixed }

// Oldest is s.oldest, for the external tests.
func (s Sliding) Oldest(k int64) int64 { return s.oldest(k) }

// Estimate is E(t) as one number, for the external tests.
func (s Sliding) Estimate(t int64, count func(j int64) int64) float64 {
	return s.Parts(t, count).Value()
}
