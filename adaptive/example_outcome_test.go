package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/adaptive"
)

// OutcomeOf maps a request's error to what the limit's algorithm learns: a
// deadline is a drop, a cancel is ignored, any other answer a success.
func ExampleOutcomeOf() {
	for _, err := range []error{
		nil,
		fmt.Errorf("query: %w", context.DeadlineExceeded),
		context.Canceled,
		errors.New("not found"),
	} {
		fmt.Println(adaptive.OutcomeOf(err) == adaptive.Success, adaptive.OutcomeOf(err) == adaptive.Dropped, adaptive.OutcomeOf(err) == adaptive.Ignored)
	}
	// Output:
	// true false false
	// false true false
	// false false true
	// true false false
}

// Gradient2 moves the limit at the end of each window of Interval, by the
// ratio of the long-term average latency to the window's: with latency
// steady and the limit in use, it grows by its Queue headroom; when latency
// quadruples, it falls.
func ExampleGradient2() {
	g := &adaptive.Gradient2{Interval: 100 * time.Millisecond, Smoothing: 1}
	t0 := time.Unix(0, 0)
	limit := 20.0
	for w, rtt := range []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 40 * time.Millisecond} {
		for i := range 10 { // a request every 10 ms, the limit in use
			start := t0.Add(time.Duration(10*w+i) * 10 * time.Millisecond)
			limit = g.Update(limit, adaptive.Sample{Start: start, RTT: rtt, InFlight: int64(limit)})
		}
		fmt.Printf("window %d, latency %v: limit %.0f\n", w+1, rtt, limit)
	}
	// Output:
	// window 1, latency 10ms: limit 24
	// window 2, latency 10ms: limit 28
	// window 3, latency 10ms: limit 32
	// window 4, latency 40ms: limit 25
}
