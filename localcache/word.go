package localcache

// A word packs a 24-bit tag (a bucket index, or for budgets a bucket index
// plus a generation, modulo 2^24) above a 40-bit count. Counts stay far below
// 2^40: limits are at most 2^32, and a count is only added to after a check
// against a budget no larger than the limit.
const (
	countBits = 40
	tagBits   = 24
	countMask = 1<<countBits - 1
	tagMask   = 1<<tagBits - 1
	// maxCount is the largest count a word holds; larger totals saturate.
	maxCount = countMask
)

func pack(tag int64, count int64) uint64 {
	if count < 0 {
		count = 0
	} else if count > maxCount {
		count = maxCount
	}
	return uint64(tag&tagMask)<<countBits | uint64(count)
}

func tagOf(w uint64) int64   { return int64(w >> countBits) }
func countOf(w uint64) int64 { return int64(w & countMask) }

// countAt returns w's count if w is tagged for bucket j, else 0.
func countAt(w uint64, j int64) int64 {
	if tagOf(w) != j&tagMask {
		return 0
	}
	return countOf(w)
}

// distance returns how many buckets j = tag lies before k (0 = k itself),
// in [-2^23, 2^23).
func distance(tag, k int64) int64 {
	d := (k - tag) & tagMask
	if d >= 1<<(tagBits-1) {
		d -= 1 << tagBits
	}
	return d
}
