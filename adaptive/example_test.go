package adaptive_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/adaptive"
)

// A limiter in front of a handler: admit by priority, release with the
// request's outcome on every path.
func Example() {
	l, err := adaptive.New(adaptive.Options{
		Algorithm: &adaptive.Gradient2{},
		Min:       4,
		Max:       500,
	})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	handle := func(ctx context.Context, p adaptive.Priority) error {
		slot, err := l.Acquire(ctx, p)
		if err != nil {
			return err // ctx done, or l closed
		}
		if !slot.OK() {
			return fmt.Errorf("overloaded: %v request shed", p) // a 503 at the front door
		}
		var reqErr error
		defer func() { slot.Done(reqErr) }() // Success, Dropped on a deadline, Ignored on a cancel
		// ... serve the request, setting reqErr ...
		return reqErr
	}
	fmt.Println(handle(context.Background(), adaptive.Default))
	// Output: <nil>
}

// AIMD with a latency threshold: a request slower than 50 ms counts as a
// drop and multiplies the limit by 0.9.
func ExampleAIMD() {
	l, err := adaptive.New(adaptive.Options{
		Algorithm: &adaptive.AIMD{Threshold: 50 * time.Millisecond, Backoff: 0.9},
		Min:       2,
		Max:       100,
		Initial:   10,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(l.Stats().Limit)
	// Output: 10
}

// With the limit full up to the sheddable share, sheddable requests are
// refused while default and critical ones are still admitted.
func ExampleLimiter_Acquire() {
	l, _ := adaptive.New(adaptive.Options{Initial: 10}) // caps: critical 10, default 9, sheddable 8
	ctx := context.Background()
	for range 8 {
		s, _ := l.Acquire(ctx, adaptive.Critical)
		defer s.Release(adaptive.Success)
	}
	for _, p := range []adaptive.Priority{adaptive.Sheddable, adaptive.Default, adaptive.Critical, adaptive.Default} {
		s, _ := l.Acquire(ctx, p)
		fmt.Println(p, s.OK())
		defer s.Release(adaptive.Success)
	}
	st := l.Stats()
	fmt.Println("in flight", st.InFlight, "shed", st.Shed[adaptive.Sheddable], st.Shed[adaptive.Default], st.Shed[adaptive.Critical])
	// Output:
	// sheddable false
	// default true
	// critical true
	// default false
	// in flight 10 shed 1 1 0
}

// Stats reads the current limit, the slots held and the refusals.
func ExampleLimiter_Stats() {
	l, _ := adaptive.New(adaptive.Options{Initial: 20})
	s, _ := l.Acquire(context.Background(), adaptive.Default)
	st := l.Stats()
	fmt.Println(st.Limit, st.InFlight, st.Caps[adaptive.Sheddable])
	s.Release(adaptive.Ignored)
	fmt.Println(l.Stats().InFlight)
	// Output:
	// 20 1 16
	// 0
}
