package window_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/window"
)

// TestSlidingHoldsAgainstAdversary: the attacks that get nearly 2L through
// the weighted window (TestAdversaryNearly2L) and a start-up burst at every
// phase of a bucket get at most L through the sliding window in any real
// interval of length W, and the exact Log agrees.
func TestSlidingHoldsAgainstAdversary(t *testing.T) {
	t.Parallel()
	for _, b := range []int{1, 2, 5, 10, 60} {
		for _, limit := range []int64{10, 100, 1000} {
			t.Run(fmt.Sprintf("B=%d/L=%d", b, limit), func(t *testing.T) {
				t.Parallel()
				geo := window.NewSliding(time.Duration(b)*time.Second, b)
				w, W := geo.Sub(), int64(geo.Window())
				t0 := 3*w - 1
				var reqs []event
				for range 2 * limit {
					reqs = append(reqs, event{t0, 1})
				}
				for range 2 * limit {
					reqs = append(reqs, event{t0 + W - 1, 1})
				}
				counter, _ := runLimiters(t, geo, limit, reqs)
				assert.Equal(t, limit, maxWindowCount(counter, W), "boundary attack")

				// A burst of 2L at phase φ of a bucket, then 2L more every
				// w/7 for three windows: the burst is still inside the real
				// window when the weighted estimate has already freed room.
				phases := []float64{0, 0.1, 0.5, 0.9, 0.999}
				switch {
				case testing.Short() && int64(b)*limit >= 60000:
					// B=60, L=1000: 2.5 million checks for one phase.
					// -short leaves its sweep to B=60/L=100 (the same
					// geometry) and B=10/L=1000 (the same limit); the
					// full run sweeps all five phases.
					phases = nil
				case testing.Short() && int64(b)*limit >= 6000:
					// The largest geometries' sweeps are a million checks
					// or more per phase: -short keeps one phase of them,
					// the full run all five.
					phases = []float64{0.5}
				}
				for _, phase := range phases {
					start := 5*w + int64(phase*float64(w))
					var reqs []event
					for tm := start; tm < start+3*W; tm += max(w/7, 1) {
						for range 2 * limit {
							reqs = append(reqs, event{tm, 1})
						}
					}
					counter, _ := runLimiters(t, geo, limit, reqs)
					assert.LessOrEqual(t, maxWindowCount(counter, W), limit, "burst at phase %v", phase)
				}
			})
		}
	}
}

// TestSlidingUtilization checks the package doc's price of the bound:
// saturated traffic (2× the limit, evenly spaced or jittered) gets at least
// B/(B+1) of the limit per window on average.
func TestSlidingUtilization(t *testing.T) {
	t.Parallel()
	for _, b := range []int{1, 5, 10, 60} {
		for _, jitter := range []float64{0, 1, 2} {
			t.Run(fmt.Sprintf("B=%d/jitter=%v", b, jitter), func(t *testing.T) {
				t.Parallel()
				const limit, windows = 1000, 20
				r := rand.New(rand.NewPCG(uint64(b), uint64(jitter*10)))
				geo := window.NewSliding(time.Duration(b)*time.Second, b)
				got, admitted := smoothMax(r, geo, limit, windows, jitter)
				assert.LessOrEqual(t, got, int64(limit))
				want := float64(limit*windows) * float64(b) / float64(b+1)
				// One window's worth of slack: the first window starts empty
				// and the last is cut off.
				assert.GreaterOrEqual(t, float64(admitted), want-limit, "admitted %d of %d offered", admitted, 2*limit*windows)
			})
		}
	}
}

// TestSlidingNoDenialBelowRate checks the package doc's no-denial claim: a
// key offered at a steady rate r per window with r·(1+1/B) ≤ L is never
// denied (at B = 10, every rate up to 0.9·L).
func TestSlidingNoDenialBelowRate(t *testing.T) {
	t.Parallel()
	for _, b := range []int{10, 20, 60} {
		for _, limit := range []int64{10, 100, 1000, 100000} {
			t.Run(fmt.Sprintf("B=%d/L=%d", b, limit), func(t *testing.T) {
				t.Parallel()
				geo := window.NewSliding(time.Duration(b)*time.Second, b)
				W := int64(geo.Window())
				rate := limit * int64(b) / int64(b+1) // r·(1+1/B) ≤ L
				gap := W / rate
				c := reference.NewCounter(geo, limit)
				for i := range 5 * rate {
					tm := 12345 + i*gap
					if !c.Allow(tm, 1) {
						t.Fatalf("request %d at %d denied: rate %d per window, limit %d", i, tm, rate, limit)
					}
				}
			})
		}
	}
}
