package adaptive

import "time"

// Sample is what a Limiter tells its Algorithm about one request that
// ended with Success or Dropped.
type Sample struct {
	// Start is when the request was admitted.
	Start time.Time
	// RTT is how long it held its slot.
	RTT time.Duration
	// InFlight is the number of requests in flight just after it was
	// admitted (itself included).
	InFlight int64
	// Dropped is true if the request ended with Dropped (a timeout, an
	// overload answer from downstream).
	Dropped bool
}

// Algorithm moves a Limiter's limit from the requests' samples.
//
// A Limiter calls Update once per sample, never concurrently, with its
// current estimate of the limit (a real number, not yet rounded), and takes
// the result as the new estimate, which it then clamps to
// [Options.Min, Options.Max]. An Algorithm keeps state (averages, the last
// decrease): give each Limiter its own.
type Algorithm interface {
	// Update returns the new estimate of the limit after sample s, given
	// the current estimate limit.
	Update(limit float64, s Sample) float64
}

// validator is an Algorithm that checks its configuration in New.
type validator interface {
	Validate() error
}
