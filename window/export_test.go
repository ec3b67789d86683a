package window

import "time"

// Fixed reports whether s is a fixed window, for the external tests.
func (s Sliding) Fixed() bool { return s.fixed }

// Oldest is s.oldest, for the external tests.
func (s Sliding) Oldest(k int64) int64 { return s.oldest(k) }

// Estimate is E(t) as one number, for the external tests.
func (s Sliding) Estimate(t int64, count func(j int64) int64) float64 {
	return s.Parts(t, count).Value()
}

// admit decides cost n at t (ns) on s: it returns the new state and true if
// n is admitted, and s and false if not. Check decides the same and reports
// the rest.
func (w WarmUp) admit(s Warm, t, n int64) (Warm, bool) {
	if n < 0 || n > w.burst {
		return s, false
	}
	now := micros(t)
	if !w.fits(debtMicros(s.Next, now), n) {
		return s, false
	}
	return w.take(s, now, n), true
}

// retryAfter returns how long from t until cost n is admitted on s if
// nothing else is: 0 if it is admitted at t, -1 if it never is
// (n > Burst). Check reports it for a denial.
func (w WarmUp) retryAfter(s Warm, t, n int64) time.Duration {
	if n < 0 || n > w.burst {
		return -1
	}
	// Admitted from the first µs u with s.Next − u ≤ room(n).
	now := micros(t)
	return w.retry(now, debtMicros(s.Next, now), t, n)
}
