package adaptive

import (
	"fmt"
	"time"
)

// AIMD is additive increase, multiplicative decrease, as in TCP's
// congestion avoidance: each successful request faster than Threshold adds
// Increase/limit to the limit (so Increase per limit's worth of successes),
// and a request that was dropped or slower than Threshold multiplies it by
// Backoff.
//
// A decrease happens at most once per round trip: a slow or dropped request
// admitted before the last decrease (under the old limit) does not decrease
// the limit again. The limit does not grow while the Limiter is not using
// it: a success with fewer than half the limit in flight leaves it as is.
//
// Use a new AIMD for each Limiter.
type AIMD struct {
	// Threshold is the latency above which a request counts as a drop.
	// Required.
	Threshold time.Duration
	// Increase is what a limit's worth of successes adds; 1 if zero.
	Increase float64
	// Backoff is the factor of a decrease, in (0, 1); 0.9 if zero.
	Backoff float64

	lastCut time.Time // when the last decrease happened
}

// Validate reports a configuration error (New calls it).
func (a *AIMD) Validate() error {
	if a.Threshold <= 0 {
		return fmt.Errorf("%w: AIMD.Threshold %v: set the latency above which a request counts as a drop", ErrInvalidOptions, a.Threshold)
	}
	if a.Increase < 0 {
		return fmt.Errorf("%w: AIMD.Increase %v is negative", ErrInvalidOptions, a.Increase)
	}
	if a.Backoff < 0 || a.Backoff >= 1 {
		return fmt.Errorf("%w: AIMD.Backoff %v: want a factor in (0, 1)", ErrInvalidOptions, a.Backoff)
	}
	return nil
}

// Update implements Algorithm.
func (a *AIMD) Update(limit float64, s Sample) float64 {
	if s.Dropped || s.RTT > a.Threshold {
		if s.Start.Before(a.lastCut) {
			return limit // admitted under the limit before the last decrease
		}
		a.lastCut = s.Start.Add(s.RTT)
		backoff := a.Backoff
		if backoff == 0 {
			backoff = 0.9
		}
		return limit * backoff
	}
	if float64(s.InFlight)*2 < limit {
		return limit // not using the limit: no evidence it could be higher
	}
	inc := a.Increase
	if inc == 0 {
		inc = 1
	}
	return limit + inc/max(limit, 1)
}
