// Package rulegeo derives a validated policy.Rule's counting geometry from
// its fields: whether it is a calendar quota and in which time zone, how
// many sub-windows it counts with, and how long each is. The limiter's engines, the store's
// key layout and the tests read it; it is sluice's machinery, with no
// compatibility promise.
package rulegeo

import (
	"fmt"
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

// Location returns the time zone of a calendar rule as policy's Validate
// reads it (policy's unexported Rule.location, which this restates: change
// the two together): TimeZone loaded from the time zone database, UTC for
// an empty TimeZone, and an error for "Local" (each instance's own zone,
// which a fleet need not share) or an unknown zone.
func Location(r policy.Rule) (*time.Location, error) {
	if r.TimeZone == "Local" {
		return nil, fmt.Errorf("rulegeo: TimeZone %q is each instance's own zone", r.TimeZone)
	}
	loc, err := time.LoadLocation(r.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("rulegeo: TimeZone %q is not a known time zone", r.TimeZone)
	}
	return loc, nil
}
