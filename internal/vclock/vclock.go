// Package vclock is a virtual clock for tests: a sluice.Clock (Options.Clock)
// that a test sets and advances, so that nothing depends on the real time.
package vclock

import (
	"sync/atomic"
	"time"
)

// Clock is a settable clock: Now is NS, Unix nanoseconds, which the test
// stores and adds to. The zero value is the Unix epoch.
type Clock struct {
	NS atomic.Int64
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.NS.Load()) }
