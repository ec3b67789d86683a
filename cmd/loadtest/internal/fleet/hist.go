package fleet

import (
	"math"
	"math/bits"
	"time"
)

// histSub is the number of sub-buckets per power of two (precision ~6%).
const (
	histSubBits = 4
	histSub     = 1 << histSubBits
	histLen     = 48 * histSub
)

// Hist is a log-linear histogram of durations in ns. The zero value is
// empty. Not safe for concurrent use: each worker keeps its own and they are
// merged at the end.
type Hist struct {
	Counts []uint64 `json:"counts,omitempty"`
	N      uint64   `json:"n"`
	Max    int64    `json:"max"`
}

func histIndex(v int64) int {
	if v < histSub {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - histSubBits - 1
	i := (e+1)*histSub + int(uint64(v)>>e) - histSub
	return min(i, histLen-1)
}

func histValue(i int) float64 {
	if i < histSub {
		return float64(i)
	}
	e := i/histSub - 1
	m := i%histSub + histSub
	return (float64(m) + 0.5) * math.Ldexp(1, e)
}

// Add records one duration.
func (h *Hist) Add(ns int64) {
	if h.Counts == nil {
		h.Counts = make([]uint64, histLen)
	}
	h.Counts[histIndex(ns)]++
	h.N++
	h.Max = max(h.Max, ns)
}

// Merge adds o into h.
func (h *Hist) Merge(o *Hist) {
	if o.N == 0 {
		return
	}
	if h.Counts == nil {
		h.Counts = make([]uint64, histLen)
	}
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	h.N += o.N
	h.Max = max(h.Max, o.Max)
}

// Quantile returns the q-quantile (0 < q ≤ 1), or 0 if empty.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.N == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.N)))
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= max(rank, 1) {
			return time.Duration(min(histValue(i), float64(h.Max)))
		}
	}
	return time.Duration(h.Max)
}

// ShareAtLeast returns the fraction of samples of at least ns (to the
// histogram's precision: samples in buckets starting at 0.95·ns or above).
func (h *Hist) ShareAtLeast(ns int64) float64 {
	if h.N == 0 {
		return 0
	}
	var n uint64
	for i, c := range h.Counts {
		if c > 0 && histValue(i) >= 0.95*float64(ns) {
			n += c
		}
	}
	return float64(n) / float64(h.N)
}
