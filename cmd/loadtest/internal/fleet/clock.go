package fleet

import (
	"sync/atomic"
	"time"
)

// coarseEvery is how often the coarse clock advances.
const coarseEvery = 250 * time.Microsecond

// Clock is the load test's cheap clock: a wall-clock time (Unix ns, read
// through the monotonic clock) published every coarseEvery by one goroutine,
// so that workers read an atomic instead of the system clock.
type Clock struct {
	base  time.Time
	baseN int64
	now   atomic.Int64
	stop  chan struct{}
	done  chan struct{}
}

// NewClock starts a clock; Stop ends its goroutine.
func NewClock() *Clock {
	c := &Clock{base: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	c.baseN = c.base.UnixNano()
	c.now.Store(c.Precise())
	go func() {
		defer close(c.done)
		t := time.NewTicker(coarseEvery)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				c.now.Store(c.Precise())
			}
		}
	}()
	return c
}

// Now returns the coarse time, Unix ns.
func (c *Clock) Now() int64 { return c.now.Load() }

// Precise reads the clock now, Unix ns.
func (c *Clock) Precise() int64 { return c.baseN + int64(time.Since(c.base)) }

// Mono returns ns since the clock started (for latencies).
func (c *Clock) Mono() int64 { return int64(time.Since(c.base)) }

// Stop stops the clock's goroutine.
func (c *Clock) Stop() {
	close(c.stop)
	<-c.done
}

// sleepUntil sleeps until the coarse clock reaches t (Unix ns) or stop
// closes; it reports false if stopped.
func (c *Clock) sleepUntil(t int64, stop <-chan struct{}) bool {
	for {
		d := time.Duration(t - c.Precise())
		if d <= 0 {
			return true
		}
		if d < 2*time.Millisecond {
			time.Sleep(d)
			return true
		}
		tm := time.NewTimer(d)
		select {
		case <-stop:
			tm.Stop()
			return false
		case <-tm.C:
		}
	}
}

// recoverTime returns the store time a decision was made at. A limiter
// decides at a store time t it does not report, but its Decision.ResetAfter
// is (k+B+1)·w − t for a sliding window, (k+1)·W − t for a fixed one: so t ≡
// −ResetAfter modulo the period (w, or W). The decision was made before we
// read the store clock after the call (after, give or take the error of the
// clock offset, margin), and less than a period before: so t is the latest
// time with that residue not after after+margin.
func recoverTime(after int64, resetAfter time.Duration, period, margin int64) int64 {
	if resetAfter <= 0 || period <= 1 {
		return after
	}
	r := posMod(-int64(resetAfter), period)
	top := after + margin
	return top - posMod(top-r, period)
}

// earlier returns how many periods before t, the decision time recoverTime
// chose (the latest candidate), the decision may also have been made at,
// given that the call started no sooner than start: the candidates t −
// j·period later than start + margin − period, the lower end recoverTime
// allows for a call that took no time. 0 for a call shorter than about
// margin; at most 255.
func earlier(t, start, period, margin int64) uint8 {
	lo := start + margin - period // candidates must be later than lo
	if t-lo <= period {
		return 0
	}
	return uint8(min((t-lo+period-1)/period-1, 255))
}

// recoveryMargin is how far after our reading of the store clock a decision
// time may seem to lie: the limiter's clock offset is re-measured at every
// heartbeat from the midpoint of a round trip, so it moves by up to half a
// round trip (milliseconds on a busy machine), and we read it only every few
// ms. A quarter period.
func recoveryMargin(period int64) int64 { return period / 4 }

func posMod(a, m int64) int64 {
	a %= m
	if a < 0 {
		a += m
	}
	return a
}
