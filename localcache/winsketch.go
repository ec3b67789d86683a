package localcache

import (
	"hash/maphash"
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// winSketch counts what a table admitted to keys it does not track, per
// sub-window, in a count-min sketch: winDepth rows of width cells, each cell
// a ring of slot words like an entry's pend ring (a 24-bit bucket tag above
// a 40-bit count; a word tagged for another bucket counts zero, so buckets
// leave the window without anyone clearing them). A key's cells are one per
// row, chosen by a hash (hash/maphash, seeded per sketch, so per process).
//
// A key's estimate in a row is the window's estimate (the geometry's formula)
// over its cell's buckets; the cell holds the key's own admissions plus those
// of every key that shares it, so every row over-counts, and the estimate —
// the row whose estimate is the smallest — never under-counts the key. A
// check admitted on that estimate can therefore never take the key past the
// limit it is checked against: a key that collides with heavy keys in every
// row can be denied while it is under its limit, one that is over its limit
// is always denied.
//
// A check adds its cost to its cells first, then reads the rows, then takes
// the cost back if it does not fit: checks racing on a key can deny each
// other (each sees the other's cost) but never both be admitted past the
// limit (the last of them to read sees every admitted cost). Lock-free: one
// compare-and-swap per row to add, loads to read.
//
// Size: 4 × width × ring words of 8 bytes, width = Keys.max/64 rounded up to
// a power of two, between 64 and 4096, ring = the entry's (B+1 slots, 2 for a
// fixed window): at the default precision 22 KiB for max = 1000 and 1.4 MiB
// for the default 1,000,000. A table allocates it at its first decision on
// an untracked key.
type winSketch struct {
	geo   window.Sliding
	cells []atomic.Uint64 // row r, cell c, slot s at ((r·width)+c)·ring + s
	width int
	ring  int
	span  int
	shift uint // 64 − log2(width)
	seed  maphash.Seed
}

const (
	winDepth    = freqDepth // the rows share rowMul with the frequency sketch
	minWinWidth = 64
	maxWinWidth = 4096
)

// winWidth returns the sketch's cells per row for a bound of max keys.
func winWidth(bound int64) int { return pow2Within(bound/64, minWinWidth, maxWinWidth) }

func newWinSketch(geo window.Sliding, width, ring int) *winSketch {
	return &winSketch{
		geo:   geo,
		cells: make([]atomic.Uint64, winDepth*width*ring),
		width: width,
		ring:  ring,
		span:  geo.Span(),
		shift: uint(64 - bits.TrailingZeros(uint(width))),
		seed:  maphash.MakeSeed(),
	}
}

// bases returns the first slot word of key's cell in each row.
func (s *winSketch) bases(key string) (b [winDepth]int) {
	h := maphash.String(s.seed, key)
	for r := range b {
		b[r] = (r*s.width + int(rowIndex(h, r, s.shift))) * s.ring
	}
	return b
}

func (s *winSketch) slot(base int, j int64) *atomic.Uint64 {
	r := int64(s.ring)
	return &s.cells[base+int((j%r+r)%r)]
}

// count returns what the cell at base holds for bucket j.
func (s *winSketch) count(base int, j int64) int64 {
	return countAt(s.slot(base, j).Load(), j)
}

// row returns the window's estimate at bucket k over the cell at base,
// weighting the oldest bucket by w (as Table.scan does).
func (s *winSketch) row(base int, k int64, w float64) (e window.Estimate) {
	last := s.span - 1
	for i := 0; i < s.span; i++ {
		j := k - int64(i)
		c := s.count(base, j)
		if i == last && i > 0 {
			e.Weighted = w * float64(c)
			continue
		}
		e.Whole += c
	}
	return e
}

// add adds n to bucket k of the cell at base; false if the slot holds a
// newer bucket (this check's time is a window behind another's).
func (s *winSketch) add(base int, k, n int64) bool {
	p := s.slot(base, k)
	for {
		w := p.Load()
		c := countAt(w, k)
		if c == 0 && countOf(w) != 0 && distance(tagOf(w), k) < 0 {
			return false
		}
		if p.CompareAndSwap(w, pack(k, c+n)) {
			return true
		}
	}
}

// undo takes n back from bucket k of the cell at base, unless the bucket
// has left the slot.
func (s *winSketch) undo(base int, k, n int64) {
	p := s.slot(base, k)
	for {
		w := p.Load()
		if tagOf(w) != k&tagMask || p.CompareAndSwap(w, pack(k, countOf(w)-n)) {
			return
		}
	}
}

// estimate returns key's estimate at now (the smallest row's) and that row's
// base.
func (s *winSketch) estimate(b [winDepth]int, now int64) (window.Estimate, int) {
	k := s.geo.Index(now)
	w := s.geo.OldWeight(s.geo.Phase(now))
	best, bi := s.row(b[0], k, w), b[0]
	for _, base := range b[1:] {
		if e := s.row(base, k, w); e.Value() < best.Value() {
			best, bi = e, base
		}
	}
	return best, bi
}

// decide checks cost n for key at now against limit, and counts it if
// admitted.
func (s *winSketch) decide(key string, now, n, limit int64) verdict.Verdict {
	b := s.bases(key)
	k := s.geo.Index(now)
	for r, base := range b {
		if !s.add(base, k, n) {
			for _, done := range b[:r] {
				s.undo(done, k, n)
			}
			ra := s.geo.ResetAfter(now)
			return verdict.Verdict{Status: verdict.OverLimit, RetryAfter: ra, Reset: ra}
		}
	}
	est, bi := s.estimate(b, now)
	if room := est.Room(limit); room >= 0 {
		return verdict.Verdict{Status: verdict.Allowed, Remaining: room}
	}
	for _, base := range b {
		s.undo(base, k, n)
	}
	return verdict.Verdict{
		Reset:     s.resetOf(b, now),
		Status:    verdict.OverLimit,
		Remaining: max0(est.Room(limit) + n),
		RetryAfter: s.geo.RetryAfter(now, limit, n, func(j int64) int64 {
			return s.count(bi, j)
		}),
	}
}

// room returns how many units key has left under limit at now, as the
// sketch counts it.
func (s *winSketch) room(key string, now, limit int64) int64 {
	est, _ := s.estimate(s.bases(key), now)
	return est.Room(limit)
}

// seedEntry stores key's counts in the window at now into t's fresh entry e,
// before e is published: for each bucket, the smallest of its cells' counts
// (at least what was admitted to key in that bucket).
func (s *winSketch) seedEntry(t *Table, e *hdr, key string, now int64) {
	b := s.bases(key)
	k := s.geo.Index(now)
	for i := 0; i < s.span; i++ {
		j := k - int64(i)
		if c := s.keyCount(b, j); c > 0 {
			t.pend(e, t.slotOf(j)).Store(pack(j, c))
		}
	}
}

// keyCount returns the smallest of bucket j's counts in the cells at b: at
// least what was admitted in bucket j to their key.
func (s *winSketch) keyCount(b [winDepth]int, j int64) int64 {
	c := int64(math.MaxInt64)
	for _, base := range b {
		c = min(c, s.count(base, j))
	}
	return c
}

// takeBack takes back cost n that decide admitted for key at now, unless
// its bucket has left the cells.
func (s *winSketch) takeBack(key string, now, n int64) {
	k := s.geo.Index(now)
	for _, base := range s.bases(key) {
		s.undo(base, k, n)
	}
}

// bytes returns the sketch's size in bytes.
func (s *winSketch) bytes() int { return len(s.cells) * 8 }

// resetAt is Table.ResetAt for a key without an entry: the newest bucket
// holding a count in the key's cells is the oldest of the rows' newest (a
// row without a count in a bucket proves the key has none there).
func (s *winSketch) resetAt(key string, now int64) time.Duration {
	return s.resetOf(s.bases(key), now)
}

// resetOf is resetAt for the key whose cells are at bases b.
func (s *winSketch) resetOf(b [winDepth]int, now int64) time.Duration {
	reset := time.Duration(math.MaxInt64)
	for _, base := range b {
		reset = min(reset, s.geo.ResetAt(now, func(j int64) int64 { return s.count(base, j) }))
	}
	return reset
}
