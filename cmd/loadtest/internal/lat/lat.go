// Package lat summarizes Allow latencies: exact quantiles of samples in ns,
// shared by the oracle (sluice's checks, from the records) and the bare
// local limiters the load test runs beside it, so that their figures are
// computed alike.
package lat

import (
	"slices"
	"time"
)

// Slow is the latency from which a check counts as slow: the p99.9 target
// of a check (issue 17), above any local decision on an idle CPU and below a
// round trip to Redis on loopback.
const Slow = 50 * time.Microsecond

// Quantiles are the p50, p99 and p99.9 of a set of samples.
type Quantiles struct {
	N    int           `json:"n"`
	P50  time.Duration `json:"p50"`
	P99  time.Duration `json:"p99"`
	P999 time.Duration `json:"p999"`
	Max  time.Duration `json:"max"`
	// Slow counts the samples of at least Slow.
	Slow int `json:"slow"`
}

// Of sorts xs (latencies in ns) in place and returns its quantiles, by
// nearest rank: the q-quantile is the smallest sample with at least a
// fraction q of the samples at or below it. All zero when xs is empty.
func Of(xs []uint32) Quantiles {
	if len(xs) == 0 {
		return Quantiles{}
	}
	slices.Sort(xs)
	q := Quantiles{N: len(xs), P50: rank(xs, 0.5), P99: rank(xs, 0.99), P999: rank(xs, 0.999), Max: time.Duration(xs[len(xs)-1])}
	i, _ := slices.BinarySearch(xs, uint32(Slow))
	q.Slow = len(xs) - i
	return q
}

// rank returns the q-quantile of sorted xs by nearest rank.
func rank(xs []uint32, q float64) time.Duration {
	i := int(q*float64(len(xs))+0.999999999) - 1
	return time.Duration(xs[min(max(i, 0), len(xs)-1)])
}
