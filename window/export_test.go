package window

import "time"

// Micros is micros, for the external tests.
var Micros = micros

// LongestPeriod is c.longestPeriod, for the external tests.
func LongestPeriod(c *Calendar) time.Duration { return c.longestPeriod() }

// WarmAdmit is w.admit, for the external tests.
func WarmAdmit(w WarmUp, s Warm, t, n int64) (Warm, bool) { return w.admit(s, t, n) }
