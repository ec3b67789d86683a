package window_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/window"
)

// validBucket reports whether window, limit and burst are a rule that
// policy.Rule.Validate accepts for TokenBucket and GCRA (restated here): T =
// Window/Limit of at least 1µs, Burst·T at most 366 days.
func validBucket(win, limit, burst int64) bool {
	const maxWindow = int64(366 * 24 * time.Hour)
	if win < int64(time.Millisecond) || win > maxWindow || limit < 1 || limit > 1<<32-1 || burst < 0 || burst > 1<<32-1 {
		return false
	}
	if burst == 0 {
		burst = limit
	}
	t := (win + limit/2) / limit
	return t >= int64(time.Microsecond) && burst <= maxWindow/t
}

// FuzzGCRA: for any valid rule, any state and time, and any cost, the GCRA
// never panics, never admits past the tolerance, and its RetryAfter is
// exact (denied 1ns before, admitted at it) unless it saturates; Remaining is in [0, Burst] and
// admitted as a cost.
func FuzzGCRA(f *testing.F) {
	f.Add(int64(time.Second), int64(10), int64(0), int64(0), int64(1e18), int64(1))
	f.Add(int64(time.Second), int64(3), int64(7), int64(1e18+5), int64(1e18), int64(2))
	f.Add(int64(time.Millisecond), int64(1000), int64(1), int64(math.MaxInt64), int64(math.MinInt64), int64(1))
	f.Add(int64(366*24*time.Hour), int64(1), int64(1), int64(math.MinInt64), int64(math.MaxInt64), int64(-1))
	f.Fuzz(func(t *testing.T, win, limit, burst, tat, now, n int64) {
		if !validBucket(win, limit, burst) {
			return
		}
		g := window.NewGCRA(time.Duration(win), limit, burst)
		rem := g.Remaining(tat, now)
		if rem < 0 || rem > g.Burst() {
			t.Fatalf("Remaining %d out of [0, %d]", rem, g.Burst())
		}
		if rem > 0 {
			if _, ok := g.Admit(tat, now, rem); !ok && now <= math.MaxInt64-g.Tolerance() {
				t.Fatalf("Remaining %d not admitted", rem)
			}
		}
		if g.ResetAfter(tat, now) < 0 {
			t.Fatalf("negative ResetAfter")
		}
		next, ok := g.Admit(tat, now, n)
		ra := g.RetryAfter(tat, now, n)
		switch {
		case ok:
			if d := uint64(next) - uint64(now); d > uint64(g.Tolerance()) || next < now {
				t.Fatalf("admitted with TAT' − t = %d > τ = %d", d, g.Tolerance())
			}
			if ra != 0 {
				t.Fatalf("admitted with RetryAfter %v", ra)
			}
		case n < 0 || n > g.Burst():
			if ra != -1 {
				t.Fatalf("cost %d above Burst %d: RetryAfter %v", n, g.Burst(), ra)
			}
		case ra > 0 && ra < math.MaxInt64 && now <= math.MaxInt64-g.Tolerance()-int64(ra):
			if _, ok := g.Admit(tat, now+int64(ra)-1, n); ok {
				t.Fatalf("admitted 1ns before RetryAfter %v", ra)
			}
			if _, ok := g.Admit(tat, now+int64(ra), n); !ok {
				t.Fatalf("denied at RetryAfter %v", ra)
			}
		}
	})
}
