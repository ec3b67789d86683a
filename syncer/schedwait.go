package syncer

import "runtime/metrics"

// schedLatencies is the runtime's histogram of how long goroutines waited,
// runnable, before they ran (sampled by the runtime).
const schedLatencies = "/sched/latencies:seconds"

// longWaits returns how many of the goroutine waits the runtime sampled
// since the process started lasted starveGap or more: waits for a CPU,
// runnable, not blocked. The probe reads it before and after its wait
// (deadline.go). It allocates; it runs only when the store is suspected.
func longWaits() uint64 {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0 // a runtime without the metric: silence alone decides
	}
	h := s[0].Value.Float64Histogram()
	var n uint64
	for i, c := range h.Counts {
		if h.Buckets[i] >= starveGap.Seconds() {
			n += c
		}
	}
	return n
}
