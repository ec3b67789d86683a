package reference

import (
	"slices"

	"github.com/sluicehq/sluice/window"
)

// Counter is a single-key sliding-window (or fixed-window) limiter on plain
// integers: the reference for what sluice computes lock-free and in Redis. It is
// not safe for concurrent use. Times passed to it must not go backwards by more
// than a window.
type Counter struct {
	geo    window.Sliding
	limit  int64
	counts []int64 // ring of Span()+Buckets() buckets
	epochs []int64 // bucket index held by each ring slot
}

// NewCounter returns an empty counter that admits up to limit per window.
func NewCounter(geo window.Sliding, limit int64) *Counter {
	// A time up to a window before the newest one seen is in bucket K−B or
	// later (K the newest bucket), whose estimate reads back to K−2B: keep
	// the 2B+1 buckets K−2B..K (2 for a fixed window).
	n := geo.Span() + geo.Buckets()
	c := &Counter{geo: geo, limit: limit, counts: make([]int64, n), epochs: make([]int64, n)}
	for i := range c.epochs {
		c.epochs[i] = -1 << 62
	}
	return c
}

// Count returns the number counted in bucket j (0 if it is no longer held).
func (c *Counter) Count(j int64) int64 {
	i := c.slot(j)
	if c.epochs[i] != j {
		return 0
	}
	return c.counts[i]
}

func (c *Counter) slot(j int64) int {
	n := int64(len(c.counts))
	return int(((j % n) + n) % n)
}

// Estimate returns E(t), the counter's estimate of the events in the window
// ending at t.
func (c *Counter) Estimate(t int64) float64 { return c.geo.Parts(t, c.Count).Value() }

// Allow admits n at time t if it passes the admit test (n ≤ window.Estimate.Room),
// and counts it in bucket ⌊t/w⌋.
func (c *Counter) Allow(t int64, n int64) bool {
	if n > c.geo.Parts(t, c.Count).Room(c.limit) {
		return false
	}
	c.Add(t, n)
	return true
}

// Add counts n at time t without checking the limit.
func (c *Counter) Add(t int64, n int64) {
	j := c.geo.Index(t)
	i := c.slot(j)
	if c.epochs[i] != j {
		c.epochs[i], c.counts[i] = j, 0
	}
	c.counts[i] += n
}

// RetryAfter returns how long from t until n could be admitted (see
// window.Sliding.RetryAfter).
func (c *Counter) RetryAfter(t int64, n int64) int64 {
	return int64(c.geo.RetryAfter(t, c.limit, n, c.Count))
}

// Clone returns a deep copy of the counter, so that a decision can be tried
// without changing the original.
func (c *Counter) Clone() *Counter {
	return &Counter{geo: c.geo, limit: c.limit, counts: slices.Clone(c.counts), epochs: slices.Clone(c.epochs)}
}
