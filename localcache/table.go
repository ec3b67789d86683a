package localcache

import (
	"fmt"
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// Table is the per-key state of one rule. All methods are safe for concurrent
// use. Times are nanoseconds on the store clock.
type Table struct {
	// Written once a tick, read by every check.
	pos   atomic.Uint64 // k & tagMask | budget tag << 24 | byte offset of pend[slot] << 48
	now   atomic.Int64
	nowUs atomic.Int64 // now / 1000, for the cached denials
	reset atomic.Int64
	// lateUntil is the time until which cached denials catch the published
	// time up first (clock.go); written only when a catch-up was needed.
	lateUntil atomic.Int64

	m         *keyMap
	newEntry  func(key string) *hdr
	geo       window.Sliding
	limit     atomic.Int64 // SetLimit changes it
	ring      int          // slots per entry
	globOff   uintptr      // offset of glob[0]
	tailOff   uintptr      // offset of the tail (Eventual)
	span      int          // buckets in a window: B+1, or 1 for a fixed window
	eventual  bool
	byNeed    bool   // Config.ByNeed: new keys start parked
	ok        uint32 // state of an entry that needs nothing after an admission
	keys      *Keys
	clock     func() int64              // Config.Now: catches up a stale published time
	seed      maphash.Seed              // hashes keys for the admission rule
	strangers atomic.Pointer[winSketch] // untracked keys' counts, allocated on first use
	newRate   window.GCRA               // the early asks of new keys: newAsks a sub-window (newAsk)

	gen    atomic.Uint32
	capv   atomic.Int64
	share  atomic.Int64
	hold   atomic.Int64  // holdMost of the limit and share (lease.go)
	askAt  atomic.Int64  // twice the allowance left at which a key asks (early.go)
	health atomic.Uint32 // a health
	mode   atomic.Uint32 // Limits.Mode, also while the store is up

	// The dirty and early list heads are written by checks that dirty a
	// clean key or ask for an early sync; keep them off the cache line every
	// check reads (pos, now, nowUs, reset).
	_      [64]byte
	dirty  atomic.Pointer[hdr]
	early  atomic.Pointer[hdr]    // keys asking for an early sync (early.go)
	wake   atomic.Pointer[func()] // OnEarly
	newDue atomic.Int64           // newRate's TAT (newAsk)
	_      [32]byte
}

func newTable(cfg Config, slots int) (*Table, error) {
	ring, alloc := entryAllocator(slots, cfg.Eventual)
	if alloc == nil {
		return nil, fmt.Errorf("%w: %d slots is more than the largest ring", errConfig, slots)
	}
	t := &Table{
		m:        newKeyMap(),
		newEntry: alloc,
		geo:      cfg.Geometry,
		ring:     ring,
		globOff:  hdrSize + uintptr(ring)*8,
		tailOff:  hdrSize + uintptr(ring)*16,
		span:     cfg.Geometry.Span(),
		eventual: cfg.Eventual,
		byNeed:   cfg.Eventual && cfg.ByNeed,
		ok:       stClean,
		keys:     cfg.Keys,
		clock:    cfg.Now,
		seed:     maphash.MakeSeed(),
	}
	if t.eventual {
		t.ok = stDirty
		if t.span >= 2 { // a fixed window never asks (busy)
			t.newRate = window.NewGCRA(time.Duration(cfg.Geometry.Sub()), newAsks, newAsks)
		}
	}
	t.limit.Store(cfg.Limit)
	t.capv.Store(tableport.NoCap)
	t.share.Store(cfg.Limit)
	t.setHold()
	return t, nil
}

// posWord packs what a check needs of the time: the bucket, the budget tag
// and where the bucket's pend word is.
func (t *Table) posWord(k, tag int64) uint64 {
	off := hdrSize + uintptr(t.slotOf(k))*8
	return uint64(k&tagMask) | uint64(tag)<<24 | uint64(off)<<48
}

func (t *Table) slotOf(j int64) int {
	r := int64(t.ring)
	return int((j%r + r) % r)
}

// tick publishes the current time for Allow. The published time never goes
// back: two goroutines publish it (the limiter's ticker, and checks catching
// up a late ticker: clock.go), and a ticker that read the clock before a
// check published a later time must not undo it (an admission would count
// in a bucket that has ended). A Tick with an older time republishes the
// newer one, with the current generation (SetLimits relies on it).
func (t *Table) tick(now int64) {
	for {
		old := t.now.Load()
		if now < old {
			now = old
			break
		}
		if t.now.CompareAndSwap(old, now) {
			break
		}
	}
	k := t.geo.Index(now)
	t.nowUs.Store(now / 1000)
	t.reset.Store(int64(t.geo.ResetAfter(now)))
	for {
		// Read the generation after the position: a SetLimits that bumps it
		// later publishes its own position after our load, so the swap
		// fails rather than put the old generation's tag back (which would
		// keep budgets cached under the old limits valid until the next
		// Tick).
		old := t.pos.Load()
		tag := (k + int64(t.gen.Load())) & tagMask
		if t.pos.CompareAndSwap(old, t.posWord(k, tag)) {
			return
		}
	}
}

// Now returns the time of the last Tick.
func (t *Table) Now() int64 { return t.now.Load() }

// ResetAfter returns the ResetAfter of a check at the time of the last Tick.
func (t *Table) ResetAfter() time.Duration { return time.Duration(t.reset.Load()) }

// genStride is what SetLimits adds to the generation. A budget's tag is
// bucket + generation (mod 2^24): with a stride of 1, the budget a check at
// bucket k+1 cached under generation g would be valid for bucket k under g+1.
// With 2^12+1, the tags of buckets less than 4097 apart collide only across
// 4095 or more generations.
const genStride = 1<<12 + 1

// setLimits changes the cap, share and store state, and invalidates every
// cached budget.
func (t *Table) setLimits(l tableport.Limits) {
	t.capv.Store(l.Cap)
	t.share.Store(l.Share)
	t.setHold()
	t.mode.Store(uint32(l.Mode))
	h := healthOfLimits(l)
	was := health(t.health.Swap(uint32(h)))
	t.gen.Add(genStride)
	t.tick(t.now.Load())
	if t.eventual && was == healthy && h != healthy {
		t.unparkAll() // a sync of every key admitted to: see Need
	}
}

// setLimit changes the rule's limit per window, keeping every count, and
// invalidates every cached budget: the next check of each key plans on the
// new limit.
func (t *Table) setLimit(limit int64) {
	t.limit.Store(limit)
	t.setHold()
	t.gen.Add(genStride)
	t.tick(t.now.Load())
}

// limits returns the current limits.
func (t *Table) limits() tableport.Limits {
	h := health(t.health.Load())
	return tableport.Limits{
		Cap:        t.capv.Load(),
		Share:      t.share.Load(),
		Down:       h != healthy && h != recovering,
		Mode:       policy.FailureMode(t.mode.Load()),
		Recovering: h == recovering,
	}
}

// room returns how many units the admit test (window.Estimate.Room) would
// let key pass at now, as this instance sees the window; a key this table
// does not track has the whole Limit, less, in a Local table, what its
// sketch of untracked keys counts for it.
func (t *Table) room(key string, now int64) int64 {
	e := t.m.Load(key)
	if e == nil {
		return t.untrackedRoom(key, now)
	}
	return t.roomOf(e, now)
}

// roomReset returns how many units the admit test (window.Estimate.Room)
// would let key pass at now, as this instance sees the window (a key this
// table does not track has the whole Limit, less, in a Local table, what its
// sketch of untracked keys counts for it), and ResetAt, with one lookup (a
// Peek).
func (t *Table) roomReset(key string, now int64) (int64, time.Duration) {
	e := t.m.Load(key)
	if e == nil {
		return t.untrackedRoom(key, now), t.untrackedReset(key, now)
	}
	return t.roomOf(e, now), t.resetOf(e, now)
}

// roomOf is room for the key of entry e.
func (t *Table) roomOf(e *hdr, now int64) int64 {
	k := t.geo.Index(now)
	s := t.slotOf(k)
	v := t.scan(e, k, s, t.geo.Phase(now))
	cur := countAt(t.pend(e, s).Load(), k)
	// As plan: the lease's units are this instance's to admit, used or not.
	return v.others.Room(t.limit.Load()) + t.leaseAt(e, k) - cur
}

// estimate returns the windowed estimate for key at now, and this instance's
// own unacknowledged count in the window; ok is false if the key is not
// tracked.
func (t *Table) estimate(key string, now int64) (est float64, own int64, ok bool) {
	e := t.m.Load(key)
	if e == nil {
		return 0, 0, false
	}
	div, est := t.unacked(e, now)
	return est, div, true
}

// ResetAt returns how long from now until the window holds nothing of key as
// this instance sees it (window.Sliding.ResetAt): until the newest bucket
// holding a count of the key — this instance's pending count, the store's
// total as last pulled, a lease — leaves the window; 0 if the window holds
// none. While nothing more is counted for the key, now+ResetAt(key, now)
// never moves later. A key this table does not track is read from its
// sketch of untracked keys (a Local table's; an Eventual table's only
// while the store is down): the newest bucket every row of the sketch
// holds a count in, which is never older than the key's own newest.
func (t *Table) ResetAt(key string, now int64) time.Duration {
	e := t.m.Load(key)
	if e == nil {
		return t.untrackedReset(key, now)
	}
	return t.resetOf(e, now)
}

// untrackedReset is ResetAt for a key without an entry: read on the
// sketch of untracked keys, 0 without one.
func (t *Table) untrackedReset(key string, now int64) time.Duration {
	if s := t.strangers.Load(); s != nil {
		return s.resetAt(key, now)
	}
	return 0
}

// resetOf is ResetAt for the key of entry e.
func (t *Table) resetOf(e *hdr, now int64) time.Duration {
	k := t.geo.Index(now)
	s := t.slotOf(k)
	return t.geo.ResetAt(now, func(j int64) int64 {
		si := s - int(k-j)
		if si < 0 {
			si += t.ring
		}
		return countAt(t.pend(e, si).Load(), j) + countAt(t.glob(e, si).Load(), j) + t.leaseAt(e, j)
	})
}
