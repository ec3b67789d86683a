package localcache

import (
	"math/bits"
	"sync/atomic"
)

// freqSketch is the admission rule's frequency sketch (admission.go): a
// count-min sketch of freqDepth rows of 4-bit saturating counters, sixteen
// to a 64-bit word, in the manner of TinyLFU. It estimates how often a key
// was seen recently; it never under-counts what it saw since the last
// halving (each row's counter holds at least the key's own sightings; the
// estimate is the smallest of its rows), and a counter saturates at 15.
//
// Every period sightings it halves every counter (the aging of TinyLFU's
// reset), so the estimate follows recent traffic: a key must be seen again
// to keep its count, and a key seen once is forgotten at the next halving
// (1/2 rounds to 0).
//
// It is lock-free: a sighting is one compare-and-swap per row, a halving one
// compare-and-swap per word; both may interleave with any other call. It
// costs width/2 bytes per row, 2·width bytes in all, whatever the traffic.
type freqSketch struct {
	words    []atomic.Uint64 // freqDepth rows of rowWords words
	rowWords int
	shift    uint  // 64 − log2(width): a row index is the top bits of a product
	period   int64 // sightings between halvings
	seen     atomic.Int64
}

const (
	freqDepth  = 4
	counterMax = 15
	// lowBits clears what a word's shift right by one moves from each
	// counter into the top bit of the one below it.
	lowBits = 0x7777_7777_7777_7777
)

// rowMul are odd multipliers, one per row (of both sketches): a row's index
// for hash h is the top bits of mix(h)·rowMul[r], so the rows are
// independent enough for a count-min sketch from one 64-bit hash.
var rowMul = [freqDepth]uint64{0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93}

// rowIndex returns row r's index, in [0, 2^(64−shift)), for hash h.
func rowIndex(h uint64, r int, shift uint) uint64 {
	h ^= h >> 32
	return (h * rowMul[r]) >> shift
}

// newFreqSketch returns a sketch of width counters per row (a power of two,
// at least 16) that halves every period sightings.
func newFreqSketch(width int, period int64) *freqSketch {
	return &freqSketch{
		words:    make([]atomic.Uint64, freqDepth*width/16),
		rowWords: width / 16,
		shift:    uint(64 - bits.TrailingZeros(uint(width))),
		period:   max(period, 1),
	}
}

// counter returns where row r's counter for h is: its word and its shift.
func (s *freqSketch) counter(h uint64, r int) (*atomic.Uint64, uint) {
	i := rowIndex(h, r, s.shift)
	return &s.words[r*s.rowWords+int(i/16)], uint(i%16) * 4
}

// add counts one sighting of h and returns its estimate after it: the
// smallest of its counters.
func (s *freqSketch) add(h uint64) int {
	est := counterMax
	for r := range freqDepth {
		w, sh := s.counter(h, r)
		for {
			old := w.Load()
			c := int(old>>sh) & counterMax
			if c == counterMax || w.CompareAndSwap(old, old+1<<sh) {
				est = min(est, min(c+1, counterMax))
				break
			}
		}
	}
	if s.seen.Add(1)%s.period == 0 {
		s.halve()
	}
	return est
}

// estimate returns h's estimate without counting a sighting.
func (s *freqSketch) estimate(h uint64) int {
	est := counterMax
	for r := range freqDepth {
		w, sh := s.counter(h, r)
		est = min(est, int(w.Load()>>sh)&counterMax)
	}
	return est
}

// halve halves every counter, rounding down.
func (s *freqSketch) halve() {
	for i := range s.words {
		w := &s.words[i]
		for {
			old := w.Load()
			if old == 0 || w.CompareAndSwap(old, old>>1&lowBits) {
				break
			}
		}
	}
}

// bytes returns the sketch's size in bytes.
func (s *freqSketch) bytes() int { return len(s.words) * 8 }

// nextPow2 returns the smallest power of two ≥ x (1 for x ≤ 1).
func nextPow2(x int64) int64 {
	if x <= 1 {
		return 1
	}
	return 1 << bits.Len64(uint64(x-1))
}

// pow2Within returns x rounded up to a power of two, within [lo, hi]: the
// width of a sketch sized for x keys.
func pow2Within(x, lo, hi int64) int {
	return int(min(max(nextPow2(x), lo), hi))
}
