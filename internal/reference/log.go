package reference

import "time"

// Log is an exact sliding-window log for one key: it admits n at time t if the
// events admitted in (t−W, t] plus n do not exceed the limit. It keeps every
// admitted event still inside the window, so it costs memory proportional to
// the limit: the oracle against which the counters are measured. Times passed
// to Allow must not decrease. Not safe for concurrent use.
type Log struct {
	window int64
	limit  int64
	times  []int64 // admission times, ascending
	costs  []int64
	head   int   // first entry still inside the window
	sum    int64 // total cost of entries [head:]
}

// NewLog returns an empty exact log admitting up to limit per window.
func NewLog(window time.Duration, limit int64) *Log {
	return &Log{window: int64(window), limit: limit}
}

// InWindow returns the cost admitted in (t−W, t]. t must not be less than the
// last time passed to Allow, Add or InWindow.
func (l *Log) InWindow(t int64) int64 {
	for l.head < len(l.times) && l.times[l.head] <= t-l.window {
		l.sum -= l.costs[l.head]
		l.head++
	}
	if l.head > 1024 && l.head*2 > len(l.times) {
		l.times = append(l.times[:0], l.times[l.head:]...)
		l.costs = append(l.costs[:0], l.costs[l.head:]...)
		l.head = 0
	}
	return l.sum
}

// Allow admits n at t if InWindow(t)+n ≤ limit, and records it.
func (l *Log) Allow(t, n int64) bool {
	if l.InWindow(t)+n > l.limit {
		return false
	}
	l.Add(t, n)
	return true
}

// Add records n admitted at t without checking the limit.
func (l *Log) Add(t, n int64) {
	l.InWindow(t)
	l.times = append(l.times, t)
	l.costs = append(l.costs, n)
	l.sum += n
}
