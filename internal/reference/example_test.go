package reference_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/window"
)

func ExampleCounter() {
	// At most 10 per second, counted in 10 sub-windows of 100ms.
	c := reference.NewCounter(window.NewSliding(time.Second, 10), 10)
	admitted := 0
	for range 15 {
		if c.Allow(0, 1) {
			admitted++
		}
	}
	fmt.Println("admitted at 0:", admitted)

	// All 10 sit in bucket 0 [0, 100ms). Some may have come at 99ms, so
	// they count until bucket 0 has left the window entirely, at 1.1s: no
	// second-long interval ever holds more than 10.
	retry := c.RetryAfter(0, 1)
	fmt.Println("retry after:", time.Duration(retry))
	fmt.Println("1ns earlier:", c.Allow(retry-1, 1))
	fmt.Println("then:", c.Allow(retry, 1))
	// Output:
	// admitted at 0: 10
	// retry after: 1.1s
	// 1ns earlier: false
	// then: true
}

func ExampleLog() {
	// Exactly 3 per second, over any second.
	l := reference.NewLog(time.Second, 3)
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	for _, at := range []int64{0, 500, 900, 950, 1000} {
		fmt.Printf("%4dms: %v\n", at, l.Allow(ms(at), 1))
	}
	// (500ms, 1.5s] holds the requests at 900ms and 1000ms.
	fmt.Println("in window at 1.5s:", l.InWindow(ms(1500)))
	// Output:
	//    0ms: true
	//  500ms: true
	//  900ms: true
	//  950ms: false
	// 1000ms: true
	// in window at 1.5s: 2
}
