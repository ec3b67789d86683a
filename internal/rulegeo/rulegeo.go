// Package rulegeo derives a validated policy.Rule's counting geometry from
// its fields: whether it is a calendar quota, how many sub-windows it
// counts with, and how long each is. The limiter's engines, the store's
// key layout and the tests read it; it is sluice's machinery, with no
// compatibility promise.
package rulegeo

import (
	"time"

	"github.com/sluicehq/sluice/policy"
)

// Calendar reports whether r is a calendar quota (Period set).
func Calendar(r policy.Rule) bool { return r.Period != 0 }

// Buckets returns the number of sub-windows r counts with: 1 for a
// FixedWindow, Precision (or policy.DefaultPrecision) for a SlidingWindow
// or a WeightedWindow, and 1 for the algorithms without sub-windows
// (TokenBucket, GCRA, SlidingLog). policy's unexported Rule.precision,
// which Validate checks the Window against, derives the same for the
// windows (policy cannot import rulegeo): change the two together.
func Buckets(r policy.Rule) int {
	switch r.Algorithm {
	case policy.FixedWindow, policy.TokenBucket, policy.GCRA, policy.SlidingLog:
		return 1
	}
	if r.Precision == 0 {
		return policy.DefaultPrecision
	}
	return r.Precision
}

// SubWindow returns the length of one of r's sub-windows: its
// WindowLength (a calendar quota's nominal period length) / Buckets.
func SubWindow(r policy.Rule) time.Duration {
	return r.WindowLength() / time.Duration(Buckets(r))
}
