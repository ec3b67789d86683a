package oracle

import (
	"math/bits"
	"slices"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/record"
)

// radixMin is the fewest records sortRecords sorts by radix: below it a
// comparison sort is as fast and allocates nothing.
const radixMin = 1 << 12

// digitBits is the widest digit of the radix sort: 4096 counters, which
// stay in the L1 and L2 caches while a pass scatters.
const digitBits = 12

// sortRecords sorts recs by key, then time, then instance (the order Analyze
// replays them in). A throughput scenario records tens of millions of checks:
// a comparison sort of them takes seconds, so when key, time offset and
// instance fit in 64 bits together (a run of seconds or minutes over up to
// thousands of keys does), it sorts by an LSD radix sort on that composite,
// a few linear passes through a scratch copy; otherwise by comparison.
func sortRecords(recs []record.Record) {
	if len(recs) < radixMin {
		slices.SortFunc(recs, compareRecords)
		return
	}
	minT, maxT := recs[0].T, recs[0].T
	var maxK uint32
	var maxI uint16
	for i := range recs {
		r := &recs[i]
		minT, maxT = min(minT, r.T), max(maxT, r.T)
		maxK, maxI = max(maxK, r.Key), max(maxI, r.Inst)
	}
	ib := bits.Len16(maxI)
	tb := bits.Len64(uint64(maxT - minT))
	kb := bits.Len32(maxK)
	width := ib + tb + kb
	if width > 64 || maxT-minT < 0 {
		slices.SortFunc(recs, compareRecords)
		return
	}
	composite := func(r *record.Record) uint64 {
		return uint64(r.Key)<<(ib+tb) | uint64(r.T-minT)<<ib | uint64(r.Inst)
	}
	passes := (width + digitBits - 1) / digitBits
	digit := (width + passes - 1) / max(passes, 1)
	mask := uint64(1)<<digit - 1
	src, dst := recs, make([]record.Record, len(recs))
	var count [1 << digitBits]int
	for shift := 0; shift < width; shift += digit {
		clear(count[:])
		for i := range src {
			count[composite(&src[i])>>shift&mask]++
		}
		if slices.Contains(count[:mask+1], len(src)) {
			continue // every record has this digit alike
		}
		sum := 0
		for d := range count[:mask+1] {
			sum, count[d] = sum+count[d], sum
		}
		for i := range src {
			d := composite(&src[i]) >> shift & mask
			dst[count[d]] = src[i]
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &recs[0] {
		copy(recs, src)
	}
}

// compareRecords orders records by key, then time, then instance.
func compareRecords(x, y record.Record) int {
	switch {
	case x.Key != y.Key:
		return cmp(int64(x.Key), int64(y.Key))
	case x.T != y.T:
		return cmp(x.T, y.T)
	}
	return cmp(int64(x.Inst), int64(y.Inst))
}
