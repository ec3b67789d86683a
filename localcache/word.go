package localcache

// A word packs a 24-bit tag (a bucket index, or for budgets a bucket index
// plus a generation, modulo 2^24) above a 40-bit field. The field holds a
// count in its low 36 bits; a pend word keeps a 4-bit version above it
// (bumped), every other word zero there. Counts stay far below 2^36: limits
// are at most 2^34 (Config.Limit), and a count is only added to after a check
// against a budget no larger than maxCount. A room word caching a denial uses
// the whole field (deny.go).
const (
	countBits = 40 // the field below the tag
	tagBits   = 24
	fieldMask = 1<<countBits - 1
	verShift  = 36
	verMask   = fieldMask &^ countMask // a pend word's version bits
	countMask = 1<<verShift - 1
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

// bumped returns pend word w with its version one higher (modulo 16), its
// tag and count unchanged. Table.Release bumps the word of the bucket whose
// lease it ends, so that a check that read the word before the release,
// and the budget with the lease, fails its compare-and-swap and reads the
// budget again; lowering the word by the units the lease covered would not
// change it when none was used. Sixteen releases of one bucket's leases
// between a check's read and its compare-and-swap would bring the word back;
// a key holds at most two leases at a time, each ended once.
func bumped(w uint64) uint64 {
	return w&^verMask | (w+1<<verShift)&verMask
}

// withCount returns word w with count c (clamped as pack does), its tag and
// version unchanged.
func withCount(w uint64, c int64) uint64 {
	return w&^countMask | pack(0, c)
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
