package window_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/window"
)

// BenchmarkCounterAllow measures one Allow decision on a busy counter: time
// advances so requests arrive at about twice the limit, so both admissions
// and denials, bucket rotation and the weighted oldest bucket are exercised.
func BenchmarkCounterAllow(b *testing.B) {
	for _, bc := range []struct {
		name string
		geo  window.Sliding
	}{
		{"fixed", window.NewFixed(time.Second)},
		{"B=1", window.NewWeighted(time.Second, 1)},
		{"B=10", window.NewWeighted(time.Second, 10)},
		{"B=60", window.NewWeighted(time.Minute, 60)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const limit = 1000
			c := reference.NewCounter(bc.geo, limit)
			step := int64(bc.geo.Window()) / (2 * limit)
			var t int64
			admitted := 0
			b.ReportAllocs()
			for b.Loop() {
				t += step
				if c.Allow(t, 1) {
					admitted++
				}
			}
			if admitted == 0 {
				b.Fatal("nothing admitted")
			}
		})
	}
}

// BenchmarkCounterRetryAfter measures RetryAfter on a denied request, the
// path a limiter takes for every rejection.
func BenchmarkCounterRetryAfter(b *testing.B) {
	for _, bc := range []struct {
		name string
		geo  window.Sliding
	}{
		{"fixed", window.NewFixed(time.Second)},
		{"B=1", window.NewWeighted(time.Second, 1)},
		{"B=10", window.NewWeighted(time.Second, 10)},
		{"B=60", window.NewWeighted(time.Minute, 60)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const limit = 1000
			c := reference.NewCounter(bc.geo, limit)
			W := int64(bc.geo.Window())
			for i := range int64(3 * limit) {
				c.Add(i*W/limit, 2) // twice the limit, evenly: over full
			}
			now := 3*W - W/7
			if c.Clone().Allow(now, 5) {
				b.Fatal("state not denied")
			}
			b.ReportAllocs()
			for b.Loop() {
				if c.RetryAfter(now, 5) <= 0 {
					b.Fatal("no retry time")
				}
			}
		})
	}
}
