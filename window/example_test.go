package window_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/window"
)

func ExampleSliding_Parts() {
	// A 1s window in 10 sub-windows of 100ms.
	geo := window.NewSliding(time.Second, 10)
	weighted := window.NewWeighted(time.Second, 10)
	counts := map[int64]int64{0: 40} // 40 in the oldest bucket [0, 100ms)
	for j := int64(1); j <= 10; j++ {
		counts[j] = 5 // 5 in each of the 10 newest
	}
	count := func(j int64) int64 { return counts[j] }

	// At 1.05s the window is (50ms, 1.05s]: half of bucket 0 still overlaps.
	// Any of its 40 may be in that half, so the sliding window counts them
	// all, E = 10·5 + 40; the weighted one assumes they were spread evenly,
	// E = 10·5 + (1−0.5)·40.
	t := int64(1050 * time.Millisecond)
	fmt.Println("bucket", geo.Index(t), "phase", geo.Phase(t))
	fmt.Println("estimate", geo.Parts(t, count).Value())
	fmt.Println("weighted", weighted.Parts(t, count).Value())
	// Output:
	// bucket 10 phase 0.5
	// estimate 90
	// weighted 70
}
