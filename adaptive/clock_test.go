package adaptive_test

import (
	"sync/atomic"
	"time"
)

// virtualClock is a clock that moves only when told.
type virtualClock struct{ ns atomic.Int64 }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *virtualClock) Now() time.Time          { return epoch.Add(time.Duration(c.ns.Load())) }
func (c *virtualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func (c *virtualClock) Elapsed() time.Duration  { return time.Duration(c.ns.Load()) }
