package adaptive

import (
	"fmt"
	"time"
)

// Gradient2 moves the limit by the ratio of a long-term average latency to
// the short-term one, in the manner of Netflix's Gradient2. Samples are
// gathered in short windows of Interval; at the end of each window:
//
//	short    = the mean latency of the window's requests
//	long     = exponential average of short over LongWindow windows
//	gradient = clamp(Tolerance · long / short, 0.5, 1)
//	target   = limit · gradient + Queue
//	limit    = (1 − Smoothing) · limit + Smoothing · target
//
// While latency stays within Tolerance times its long-term average, the
// gradient is 1 and the limit grows by Smoothing·Queue a window (the queue
// headroom that probes for more capacity); when requests queue and latency
// rises, the gradient falls and the limit with it. A window with a dropped
// request has the target limit/2, without headroom.
//
// The long-term average is the plain mean of the first 10 windows, then an
// exponential average with factor 2/(LongWindow+1); it follows the
// short-term latency slowly (a time constant of 300 windows, 30 s, with the
// defaults), so a rise shows as a gradient below 1 for long enough to bring
// the limit down. Under overload that lasts it creeps up, and the limit with
// it: the short-term latency then sits near Tolerance times the average,
// which grows by about (Tolerance−1)·2/(LongWindow+1) a window (0.17 % with
// the defaults). When the short-term latency is less than half the average
// (the load went away), the average decays by 5 % a window, so that it does
// not hold the limit down. The limit does not change after a window in which
// fewer than half of it were in flight (nothing to learn).
//
// Use a new Gradient2 for each Limiter.
type Gradient2 struct {
	// Tolerance is how much above its long-term average latency may go
	// before the limit falls; 1.5 if zero; at least 1.
	Tolerance float64
	// Smoothing is the fraction of the way to the target the limit moves
	// per window, in (0, 1]; 0.2 if zero.
	Smoothing float64
	// Queue is the headroom added to the target, which lets the limit
	// grow; 4 if zero.
	Queue float64
	// Interval is the length of a short window; 100 ms if zero.
	Interval time.Duration
	// LongWindow is the number of short windows of the long-term average;
	// 600 if zero.
	LongWindow int

	long float64 // the long-term average latency (ns)
	n    int     // windows seen, up to warmup

	// The current short window.
	winStart time.Time
	winSum   float64 // latencies (ns)
	winN     int
	winMax   int64 // in flight, at most
	winDrop  bool
}

// warmup is the number of windows whose plain mean starts the long-term
// average.
const warmup = 10

// Validate reports a configuration error (New calls it).
func (g *Gradient2) Validate() error {
	switch {
	case g.Tolerance != 0 && g.Tolerance < 1:
		return fmt.Errorf("%w: Gradient2.Tolerance %v: want at least 1", ErrInvalidOptions, g.Tolerance)
	case g.Smoothing < 0 || g.Smoothing > 1:
		return fmt.Errorf("%w: Gradient2.Smoothing %v: want a fraction in (0, 1]", ErrInvalidOptions, g.Smoothing)
	case g.Queue < 0:
		return fmt.Errorf("%w: Gradient2.Queue %v is negative", ErrInvalidOptions, g.Queue)
	case g.Interval < 0:
		return fmt.Errorf("%w: Gradient2.Interval %v is negative", ErrInvalidOptions, g.Interval)
	case g.LongWindow < 0:
		return fmt.Errorf("%w: Gradient2.LongWindow %v is negative", ErrInvalidOptions, g.LongWindow)
	}
	return nil
}

// Update implements Algorithm.
func (g *Gradient2) Update(limit float64, s Sample) float64 {
	end := s.Start.Add(s.RTT)
	if g.winN == 0 && g.winStart.IsZero() {
		g.winStart = s.Start
	}
	g.winSum += max(float64(s.RTT), 1)
	g.winN++
	g.winMax = max(g.winMax, s.InFlight)
	g.winDrop = g.winDrop || s.Dropped
	interval := g.Interval
	if interval == 0 {
		interval = 100 * time.Millisecond
	}
	if end.Sub(g.winStart) < interval {
		return limit
	}
	short, inflight, drop := g.winSum/float64(g.winN), g.winMax, g.winDrop
	g.winStart, g.winSum, g.winN, g.winMax, g.winDrop = end, 0, 0, 0, false
	return g.update(limit, short, inflight, drop)
}

// update moves the limit at the end of a window.
func (g *Gradient2) update(limit, short float64, inflight int64, drop bool) float64 {
	tol, smooth, queue, window := g.Tolerance, g.Smoothing, g.Queue, g.LongWindow
	if tol == 0 {
		tol = 1.5
	}
	if smooth == 0 {
		smooth = 0.2
	}
	if queue == 0 {
		queue = 4
	}
	if window == 0 {
		window = 600
	}
	if g.n < warmup {
		g.n++
		g.long += (short - g.long) / float64(g.n)
	} else {
		g.long += (short - g.long) * 2 / float64(window+1)
	}
	if g.long > 2*short {
		g.long *= 0.95
	}
	if float64(inflight)*2 < limit && !drop {
		return limit
	}
	target := limit * 0.5 // a drop: halve, without headroom
	if !drop {
		target = limit*max(0.5, min(1, tol*g.long/short)) + queue
	}
	return (1-smooth)*limit + smooth*target
}
