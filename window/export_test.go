package window

import "time"

// Micros is micros, for the external tests.
var Micros = micros

// LongestPeriod is c.longestPeriod, for the external tests.
func LongestPeriod(c *Calendar) time.Duration { return c.longestPeriod() }
