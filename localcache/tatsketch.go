package localcache

import (
	"hash/maphash"
	"math/bits"
	"sync/atomic"
)

// tatSketch holds, for the keys a GCRATable or a WarmTable does not track,
// an upper bound of each key's theoretical arrival time (TAT): a count-min
// sketch whose cells hold times instead of counts. It has tatDepth rows of
// width cells, each an atomic int64; a key has one cell per row, chosen by a
// hash (hash/maphash, seeded per sketch), and its estimate is the smallest
// of its cells. The unit of the times is the table's: ns for a GCRATable,
// window.WarmUp's µs for a WarmTable. Cells start at tatFresh, a time before
// any check (a full bucket), and only ever rise.
//
// A check reads its cells (read), decides on the estimate with the table's
// math, and commits an admission (commit) by raising its cells to the TAT
// after it, next: the conservative update (a cell already above next keeps
// its value, so keys that share it are not charged for this one).
//
// # Why no key is admitted more than its own exact state admits
//
// Write TAT(x) for the state the exact algorithm (window.GCRA; the
// WarmTable's rule is in keyuntracked.go) holds for key x after x's
// admissions committed so far, in the order of their commits, each at its
// own check's time; a key with none has the full bucket. The invariant is
//
//	every cell of x holds at least TAT(x), for every key x.
//
// It holds at the start (all cells at tatFresh, every bucket full). Cells
// only rise, so another key's commit cannot break it for x. A commit of x
// raises every cell of x but the one that gave the estimate (row m, value
// v) to at least next, then compare-and-swaps row m from v to next; it
// fails, and the check reads its cells again and decides again, if row m no
// longer holds v. Because cells only rise, "still holds v" means "was not
// written since the read" (there is no ABA).
//
// Claim: when that compare-and-swap succeeds, v ≥ TAT(x). At the read,
// v ≥ TAT(x) by the invariant. Any commit A of x that came between the read
// and our compare-and-swap had raised every cell of x, row m included, to
// at least next_A = TAT(x) after A before its own commit; if that raise came
// before our read, v ≥ next_A already; if it came after, row m would not
// hold v at our compare-and-swap unless v ≥ next_A. So v is still at least
// TAT(x) when the admission takes effect.
//
// The GCRA's test and update are monotone in the TAT: if
// max(v, t) + n·T − t ≤ τ then max(TAT(x), t) + n·T − t ≤ τ, so the exact
// bucket admits what the sketch admits; and next = max(v, t) + n·T ≥
// max(TAT(x), t) + n·T, the exact TAT after the admission. When the
// compare-and-swap lands, every cell of x holds at least next (the other
// rows were raised before it and only rise): the invariant holds again.
// Hence every admission the sketch makes for x is one that window.GCRA,
// run on x's own admissions alone, makes too, and x's admissions stay
// within Burst + r·τ over any interval of length τ, as a tracked key's.
//
// A key that collides with heavy keys in every row reads a later TAT than
// its own and can be denied while its own bucket has room; it is never
// admitted beyond its own. A denial writes nothing. A commit that fails
// leaves its raises in place: a debt nobody took, which can only deny.
// Checks racing on one key serialize on row m's compare-and-swap, so two
// of them can never both be admitted on one reading.
//
// Lock-free: a check is tatDepth loads, and an admission up to tatDepth−1
// compare-and-swaps to raise and one to commit. No allocation.
//
// Size: tatDepth × width × 8 bytes, width = Keys.max rounded up to a power
// of two within [1024, 2^15]: 32 KiB for max ≤ 1024, 1 MiB for the default
// 1,000,000, allocated at the table's first decision on a key without an
// entry.
type tatSketch struct {
	cells []atomic.Int64 // row r's cell c at r·width + c
	width int
	shift uint // 64 − log2(width)
	seed  maphash.Seed
}

const (
	tatDepth    = freqDepth // the rows share rowMul with the frequency sketch
	minTATWidth = 1 << 10
	maxTATWidth = 1 << 15
)

// tatWidth returns the sketch's cells per row for a bound of bound keys.
func tatWidth(bound int64) int { return pow2Within(bound, minTATWidth, maxTATWidth) }

// loadTATSketch returns the sketch in p, allocating it on first use for the
// key bound keys: a bucket table's sketch of untracked keys.
func loadTATSketch(p *atomic.Pointer[tatSketch], keys *Keys) *tatSketch {
	if s := p.Load(); s != nil {
		return s
	}
	p.CompareAndSwap(nil, newTATSketch(tatWidth(keys.max)))
	return p.Load()
}

func newTATSketch(width int) *tatSketch {
	s := &tatSketch{
		cells: make([]atomic.Int64, tatDepth*width),
		width: width,
		shift: uint(64 - bits.TrailingZeros(uint(width))),
		seed:  maphash.MakeSeed(),
	}
	for i := range s.cells {
		s.cells[i].Store(tatFresh)
	}
	return s
}

// tatCells is one key's cells in a tatSketch and what a check read there.
type tatCells struct {
	at  [tatDepth]int   // the cells' indices
	v   [tatDepth]int64 // their values as last read
	low int             // the row whose value is the smallest
}

// cellsOf returns key's cells, read.
func (s *tatSketch) cellsOf(key string) (c tatCells) {
	h := maphash.String(s.seed, key)
	for r := range c.at {
		c.at[r] = r*s.width + int(rowIndex(h, r, s.shift))
	}
	s.read(&c)
	return c
}

// read loads c's cells again.
func (s *tatSketch) read(c *tatCells) {
	c.low = 0
	for r, i := range c.at {
		c.v[r] = s.cells[i].Load()
		if c.v[r] < c.v[c.low] {
			c.low = r
		}
	}
}

// estimate returns the key's TAT as the sketch bounds it: the smallest of
// its cells as last read.
func (c *tatCells) estimate() int64 { return c.v[c.low] }

// commit records an admission decided on c's estimate, after which the
// key's TAT is next (at least the estimate): it raises the other rows to
// next, then swaps next into the row that gave the estimate if that row has
// not changed since it was read. It reports whether the admission took
// effect; if not, the caller reads the cells again and decides again.
func (s *tatSketch) commit(c *tatCells, next int64) bool {
	for r, i := range c.at {
		if r != c.low {
			raise(&s.cells[i], next)
		}
	}
	return s.cells[c.at[c.low]].CompareAndSwap(c.v[c.low], next)
}

// raise makes p hold at least v.
func raise(p *atomic.Int64, v int64) {
	for {
		old := p.Load()
		if old >= v || p.CompareAndSwap(old, v) {
			return
		}
	}
}

// estimate returns key's TAT as the sketch bounds it.
func (s *tatSketch) estimate(key string) int64 {
	c := s.cellsOf(key)
	return c.estimate()
}

// bytes returns the sketch's size in bytes.
func (s *tatSketch) bytes() int { return len(s.cells) * 8 }
