package localcache

import (
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/puzpuzpuz/xsync/v3"

	"github.com/sluicehq/sluice/window"
)

// Entry states. A live entry is clean or dirty (Eventual tables: admitted to
// since the syncer last drained it). Sweep marks an idle clean entry dead, and
// a dead one that is still idle at the next sweep gone, then removes it. A
// check that finds its entry dead revives it; one that finds it gone undoes
// its addition and starts over on a fresh entry.
const (
	stClean uint32 = iota
	stDirty
	stDead
	stGone
)

// hdr is the fixed part of an entry, the same for every ring size. An entry
// is one allocation (see newEntry): a hdr followed by its ring, pend[0..R)
// then, in an Eventual table, glob[0..R) and a tail; each slot word an atomic
// uint64. A *hdr is a pointer to the whole entry: slot words and the tail are
// reached by offset from it (Table.pend, Table.glob, Table.tail), so the hot
// path needs no knowledge of the ring size and no generics. An entry takes 24
// bytes plus 8 per slot in a Local table, 48 bytes plus 16 per slot in an
// Eventual one.
type hdr struct {
	state  atomic.Uint32
	synced atomic.Uint32 // bumped by Settle once it has stored totals
	budget atomic.Uint64 // tag: bucket+generation; count: most the current pend may reach
	room   atomic.Uint64 // same tag; count: Limit minus the estimate without the current pend
}

// tail is what only an Eventual table's entries carry, after their ring: the
// dirty-list link and the key, for the syncer.
type tail struct {
	next atomic.Pointer[hdr]
	key  string
}

// hdrSize is the offset of pend[0] in an entry.
const hdrSize = unsafe.Sizeof(hdr{})

func (*hdr) ref() {}

// pend returns slot i's pend word of e.
func (t *Table) pend(e *hdr, i int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Add(unsafe.Pointer(e), hdrSize+uintptr(i)*8))
}

// glob returns slot i's glob word of e. A Local table's entries have none:
// it returns a word that stays zero (a Local table never stores totals).
func (t *Table) glob(e *hdr, i int) *atomic.Uint64 {
	if !t.eventual {
		return &noGlob
	}
	return (*atomic.Uint64)(unsafe.Add(unsafe.Pointer(e), t.globOff+uintptr(i)*8))
}

// tail returns e's tail (Eventual tables only).
func (t *Table) tail(e *hdr) *tail {
	return (*tail)(unsafe.Add(unsafe.Pointer(e), t.tailOff))
}

// noGlob is the glob word of every slot of a Local table's entries; nothing
// writes it.
var noGlob atomic.Uint64

// Table is the per-key state of one rule. All methods are safe for concurrent
// use. Times are nanoseconds on the store clock.
type Table struct {
	// Written once a tick, read by every check.
	pos   atomic.Uint64 // k & tagMask | budget tag << 24 | byte offset of pend[slot] << 48
	now   atomic.Int64
	reset atomic.Int64

	m        *xsync.MapOf[string, *hdr]
	newEntry func(key string) *hdr
	geo      window.Sliding
	limit    int64
	ring     int     // slots per entry
	globOff  uintptr // offset of glob[0]
	tailOff  uintptr // offset of the tail (Eventual)
	span     int     // buckets in a window: B+1, or 1 for a fixed window
	eventual bool
	ok       uint32 // state of an entry that needs nothing after an admission
	keys     *Keys
	overflow *hdr

	gen    atomic.Uint32
	capv   atomic.Int64
	share  atomic.Int64
	health atomic.Uint32

	// The dirty list head is written by checks that dirty a clean key; keep it
	// off the cache line every check reads (pos, now, reset).
	_     [64]byte
	dirty atomic.Pointer[hdr]
	_     [56]byte
}

func newTable(cfg Config, slots int) (*Table, error) {
	ring, alloc := entryAllocator(slots, cfg.Eventual)
	if alloc == nil {
		return nil, fmt.Errorf("%w: %d slots is more than the largest ring", ErrConfig, slots)
	}
	t := &Table{
		m:        xsync.NewMapOf[string, *hdr](),
		newEntry: alloc,
		geo:      cfg.Geometry,
		limit:    cfg.Limit,
		ring:     ring,
		globOff:  hdrSize + uintptr(ring)*8,
		tailOff:  hdrSize + uintptr(ring)*16,
		span:     cfg.Geometry.Span(),
		eventual: cfg.Eventual,
		ok:       stClean,
		keys:     cfg.Keys,
	}
	if t.eventual {
		t.ok = stDirty
	}
	t.overflow = t.newEntry("")
	t.overflow.state.Store(t.ok)
	t.capv.Store(NoCap)
	t.share.Store(cfg.Limit)
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

// Tick publishes the current time for Allow.
func (t *Table) Tick(now int64) {
	k := t.geo.Index(now)
	t.now.Store(now)
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

// genStride is what SetLimits adds to the generation. A budget's tag is
// bucket + generation (mod 2^24): with a stride of 1, the budget a check at
// bucket k+1 cached under generation g would be valid for bucket k under g+1.
// With 2^12+1, the tags of buckets less than 4097 apart collide only across
// 4095 or more generations.
const genStride = 1<<12 + 1

// SetLimits changes the cap, share and health, and invalidates every cached
// budget.
func (t *Table) SetLimits(l Limits) {
	t.capv.Store(l.Cap)
	t.share.Store(l.Share)
	t.health.Store(uint32(l.Health))
	t.gen.Add(genStride)
	t.Tick(t.now.Load())
}

// Limits returns the current limits.
func (t *Table) Limits() Limits {
	return Limits{Cap: t.capv.Load(), Share: t.share.Load(), Health: Health(t.health.Load())}
}

// Allow checks cost n for key at the time of the last Tick.
func (t *Table) Allow(key string, n int64) Verdict {
	return t.allow(key, n, t.pos.Load(), 0, true)
}

// TryResult says what TryAllow did.
type TryResult uint8

const (
	// TryUnknown: nothing was decided or counted; call Allow.
	TryUnknown TryResult = iota
	// TryAllowed: admitted and counted; the value is the window's remaining
	// room.
	TryAllowed
	// TryDenied: denied (the key's denial of cost 1 is cached and still
	// holds); the value is RetryAfter in ns.
	TryDenied
)

// TryAllow is the fast path of Allow on its own, at the time of the last
// Tick: it admits cost n for key if the key's cached budget is valid and has
// room, denies it if the key's cached denial still holds, and otherwise
// decides nothing (TryUnknown: call Allow). Its small result keeps the common
// cases cheap for callers that build their own decision.
func (t *Table) TryAllow(key string, n int64) (int64, TryResult) {
	p := t.pos.Load()
	e, found := t.m.Load(key)
	if !found {
		return 0, TryUnknown
	}
	bw := e.budget.Load()
	tag := int64(p>>24) & tagMask
	if tagOf(bw) != tag {
		return 0, TryUnknown
	}
	c, added := t.add(e, uintptr(p>>48), countOf(bw), n)
	rw := e.room.Load()
	if added {
		return max0(roomOf(rw) - c), TryAllowed
	}
	if n == 1 && tagOf(rw) == tag {
		if ra := cachedDenial(rw, t.now.Load()); ra > 0 {
			return int64(ra), TryDenied
		}
	}
	return 0, TryUnknown
}

// add adds n to the pend word at offset off of e if the result stays within
// max, and brings e into its live state; it returns the new count. A
// compare-and-swap, not an add and an undo: the syncer may read pend at any
// moment, and must never push a count that is then taken back.
func (t *Table) add(e *hdr, off uintptr, max, n int64) (int64, bool) {
	pw := (*atomic.Uint64)(unsafe.Add(unsafe.Pointer(e), off))
	for {
		w := pw.Load()
		c := countOf(w) + n
		if c > max {
			return 0, false
		}
		if pw.CompareAndSwap(w, w+uint64(n)) {
			if st := e.state.Load(); st != t.ok && !t.settleState(e, st) {
				pw.Add(-uint64(n)) // a gone entry: nobody syncs it any more
				return 0, false
			}
			return c, true
		}
	}
}

// ResetAfter returns the ResetAfter of a check at the time of the last Tick.
func (t *Table) ResetAfter() time.Duration { return time.Duration(t.reset.Load()) }

// AllowAt checks cost n for key at time now.
func (t *Table) AllowAt(key string, now int64, n int64) Verdict {
	k := t.geo.Index(now)
	tag := (k + int64(t.gen.Load())) & tagMask
	return t.allow(key, n, t.posWord(k, tag), now, false)
}

// allow is the hot path: a valid budget and room in it cost one map load, two
// loads and one compare-and-swap on the entry, and a load of its state. With
// ticked, the time is the last Tick's (read only if needed); else it is now.
func (t *Table) allow(key string, n int64, p uint64, now int64, ticked bool) Verdict {
	tag := int64(p>>24) & tagMask
	off := uintptr(p >> 48)
	for {
		e := t.lookup(key)
		if bw := e.budget.Load(); tagOf(bw) == tag {
			// A budget tagged for this bucket is only stored after the
			// bucket's pend word holds it, so the addition lands there.
			if c, ok := t.add(e, off, countOf(bw), n); ok {
				v := Verdict{Status: Allowed, Overflow: e == t.overflow, Remaining: max0(roomOf(e.room.Load()) - c)}
				if ticked {
					v.ResetAfter = time.Duration(t.reset.Load())
				} else {
					v.ResetAfter = t.geo.ResetAfter(now)
				}
				return v
			}
		}
		if ticked {
			now = t.now.Load()
		}
		if v, ok := t.slow(e, now, n, nil); ok {
			return v
		}
		t.replace(e, key) // e is gone: start over on a fresh entry
	}
}

func max0(x int64) int64 {
	if x < 0 {
		return 0
	}
	return x
}

func (t *Table) lookup(key string) *hdr {
	if e, ok := t.m.Load(key); ok {
		return e
	}
	if t.keys.n.Load() >= t.keys.max {
		t.keys.full.Store(true)
		return t.overflow
	}
	k := strings.Clone(key) // the caller's string may live in a reused buffer
	e, loaded := t.m.LoadOrCompute(k, func() *hdr { return t.newEntry(k) })
	if !loaded {
		t.keys.n.Add(1)
	}
	return e
}

// settleState brings a just-admitted-to entry into its live state: it queues a
// clean Eventual entry for the syncer and revives a dead one. It returns false
// if the entry is gone: the caller must undo its addition and start over on a
// fresh entry (replace).
func (t *Table) settleState(e *hdr, st uint32) bool {
	for {
		switch st {
		case t.ok:
			return true
		case stGone:
			return false
		case stClean, stDead:
			if e.state.CompareAndSwap(st, t.ok) {
				if t.ok == stDirty {
					t.push(e)
				}
				return true
			}
		default: // stDirty in a Local table: cannot happen; nothing to do
			return true
		}
		st = e.state.Load()
	}
}

// replace installs a fresh entry for key, whose entry e is gone, unless
// another check already did.
func (t *Table) replace(e *hdr, key string) {
	t.m.Compute(key, func(old *hdr, loaded bool) (*hdr, bool) {
		if loaded && old != e {
			return old, false
		}
		t.keys.n.Add(1)
		return t.newEntry(strings.Clone(key)), false
	})
}

func (t *Table) push(e *hdr) {
	for {
		h := t.dirty.Load()
		t.tail(e).next.Store(h)
		if t.dirty.CompareAndSwap(h, e) {
			return
		}
	}
}

// view is what a scan of an entry's ring finds, excluding the current
// bucket's pend.
type view struct {
	others float64 // windowed estimate of everything but the current pend
	own    float64 // windowed estimate of this instance's other pend
	div    int64   // unacknowledged own count in the window's other buckets
}

// scan reads the ring at bucket k (slot s), phase phase. It reads each slot's
// pend before its glob: Settle stores glob before it lowers pend, so a scan can
// count an acknowledged count twice but never miss it.
func (t *Table) scan(e *hdr, k int64, s int, phase float64) (v view) {
	last := t.span - 1
	for i := 0; i < t.span; i++ {
		si := s - i
		if si < 0 {
			si += t.ring
		}
		j := k - int64(i)
		p := countAt(t.pend(e, si).Load(), j)
		g := countAt(t.glob(e, si).Load(), j)
		if i == 0 {
			v.others += float64(g)
			continue
		}
		w := 1.0
		if i == last {
			w = 1 - phase
		}
		v.others += w * float64(p+g)
		v.own += w * float64(p)
		v.div += p
	}
	return v
}

// rotate makes slot s hold bucket k, dropping what an older bucket left there
// (it is outside the window). It returns false if the slot holds a newer
// bucket: the caller's time is more than a window behind another caller's.
func (t *Table) rotate(e *hdr, k int64, s int) bool {
	for {
		w := t.pend(e, s).Load()
		tag := tagOf(w)
		if tag == k&tagMask {
			return true
		}
		if distance(tag, k) < 0 && countOf(w) != 0 {
			return false
		}
		if t.pend(e, s).CompareAndSwap(w, pack(k, 0)) {
			return true
		}
	}
}

// plan is a freshly computed budget.
type plan struct {
	k, tag         int64
	s              int
	room, budget   int64
	shareBudget    int64 // FailLocal only
	health         Health
	local, rotated bool
}

// plan rotates e to the bucket of now, computes its budget and, unless the
// health is forced, stores it.
func (t *Table) plan(e *hdr, now int64, force *Health) plan {
	g := t.gen.Load() // before the limits: a budget never outlives a SetLimits
	p := plan{k: t.geo.Index(now), local: !t.eventual || e == t.overflow}
	p.s = t.slotOf(p.k)
	p.tag = (p.k + int64(g)) & tagMask
	switch {
	case force != nil:
		p.health = *force
	case !p.local:
		p.health = Health(t.health.Load())
	}
	if p.rotated = t.rotate(e, p.k, p.s); !p.rotated || p.health == FailClosed {
		return p
	}
	for {
		sq := e.synced.Load() // before the scan
		v := t.scan(e, p.k, p.s, t.geo.Phase(now))
		p.room = floorCount(float64(t.limit) - v.others)
		p.budget = p.room
		switch p.health {
		case Healthy:
			if !p.local {
				p.budget = min(p.budget, t.capv.Load()-v.div)
			}
		case FailLocal:
			p.shareBudget = floorCount(float64(t.share.Load()) - v.own)
			p.budget = min(p.budget, p.shareBudget)
		case FailOpen:
			p.budget = maxCount / 2
		}
		p.budget = max0(p.budget)
		if force != nil {
			return p
		}
		e.room.Store(pack(p.tag, p.room))
		e.budget.Store(pack(p.tag, p.budget))
		// A Settle that stored new totals after our scan may have stored
		// its budget before ours: ours, from the superseded totals, must not
		// outlive it, so compute again.
		if e.synced.Load() == sq {
			return p
		}
	}
}

func floorCount(x float64) int64 {
	if x >= maxCount {
		return maxCount
	}
	if x <= -maxCount {
		return -maxCount
	}
	return int64(math.Floor(x + 1e-9))
}

// slow recomputes e's budget at now and decides n exactly. ok is false if the
// entry turned out to be gone and the check must start over.
func (t *Table) slow(e *hdr, now int64, n int64, force *Health) (v Verdict, ok bool) {
	p := t.plan(e, now, force)
	v = Verdict{Overflow: e == t.overflow, ResetAfter: t.geo.ResetAfter(now)}
	if !p.rotated {
		v.Status = OverLimit
		return v, true
	}
	if p.health == FailClosed {
		v.Status = StoreDown
		return v, true
	}
	for {
		w := t.pend(e, p.s).Load()
		if tagOf(w) != p.k&tagMask {
			if !t.rotate(e, p.k, p.s) {
				v.Status = OverLimit
				return v, true
			}
			continue
		}
		c := countOf(w) + n
		if c > p.budget {
			v.Remaining = max0(p.room - countOf(w))
			break
		}
		if t.pend(e, p.s).CompareAndSwap(w, w+uint64(n)) {
			if st := e.state.Load(); st != t.ok && !t.settleState(e, st) {
				t.pend(e, p.s).Add(-uint64(n))
				return v, false
			}
			v.Status, v.Remaining = Allowed, max0(p.room-c)
			return v, true
		}
	}
	cur := countOf(t.pend(e, p.s).Load()) + n
	if p.health == Healthy && !p.local && cur <= p.room {
		v.Status = OverCap
		return v, true
	}
	v.Status = OverLimit
	if cur > p.room {
		v.RetryAfter = t.geo.RetryAfter(now, t.limit, n, func(j int64) int64 {
			si := t.slotOf(j)
			return countAt(t.pend(e, si).Load(), j) + countAt(t.glob(e, si).Load(), j)
		})
	}
	if p.health == FailLocal && cur > p.shareBudget {
		share := t.share.Load()
		ra := v.ResetAfter
		if n <= share {
			ra = t.geo.RetryAfter(now, share, n, func(j int64) int64 {
				return countAt(t.pend(e, t.slotOf(j)).Load(), j)
			})
		}
		if v.RetryAfter >= 0 {
			v.RetryAfter = max(v.RetryAfter, ra)
		}
	}
	if n == 1 && force == nil {
		t.cacheDenial(e, p.tag, now, v.RetryAfter)
	}
	return v, true
}

// A denial of cost 1 is cached in the room word: the denyFlag bit and the
// retry time in µs, modulo 2^39. Until then every cost is denied (nothing can
// be admitted to the key in its bucket, and only a Settle or SetLimits, which
// store a new room word or bump the tag, change that), so TryAllow can deny
// without the slow path. A deny path no slower than the allow path keeps a
// flood of denied requests cheap.
const (
	denyFlag  = 1 << 39
	denyMask  = denyFlag - 1
	denyLimit = 1 << 37 // µs: only retry times well inside the modulus are cached
)

func (t *Table) cacheDenial(e *hdr, tag, now int64, retryAfter time.Duration) {
	us := (int64(retryAfter) + 999) / 1000
	if retryAfter <= 0 || us >= denyLimit {
		return
	}
	e.room.Store(pack(tag, denyFlag|((now/1000+us)&denyMask)))
}

// roomOf returns the room in room word rw (0 while it caches a denial).
func roomOf(rw uint64) int64 {
	if c := countOf(rw); c&denyFlag == 0 {
		return c
	}
	return 0
}

// cachedDenial returns how long a cached denial in room word rw still holds
// at now, or 0.
func cachedDenial(rw uint64, now int64) time.Duration {
	c := countOf(rw)
	if c&denyFlag == 0 {
		return 0
	}
	d := (c - now/1000) & denyMask // µs until the retry time, modulo 2^39
	if d == 0 || d >= denyLimit {
		return 0 // reached, or long past
	}
	return time.Duration(d) * time.Microsecond
}

// AllowDegraded checks cost n for key at now as if the store's health were h,
// one of the failure modes (the caller's after the store failed it), counting
// what it admits. It leaves cached budgets alone.
func (t *Table) AllowDegraded(key string, now int64, n int64, h Health) Verdict {
	for {
		e := t.lookup(key)
		if v, ok := t.slow(e, now, n, &h); ok {
			return v
		}
		t.replace(e, key)
	}
}

// Ref returns key's entry, creating it; ok is false if the cache is full and
// key is on the shared overflow entry.
func (t *Table) Ref(key string) (Ref, bool) {
	e := t.lookup(key)
	return e, e != t.overflow
}

// Estimate returns the windowed estimate for key at now, and this instance's
// own unacknowledged count in the window; ok is false if the key is not
// tracked.
func (t *Table) Estimate(key string, now int64) (est float64, own int64, ok bool) {
	e, ok := t.m.Load(key)
	if !ok {
		return 0, 0, false
	}
	k := t.geo.Index(now)
	s := t.slotOf(k)
	v := t.scan(e, k, s, t.geo.Phase(now))
	cur := countAt(t.pend(e, s).Load(), k)
	return v.others + float64(cur), v.div + cur, true
}

// Drain appends the keys admitted to since the last Drain, marking them
// clean, and returns the extended slice. Only one goroutine may drain.
func (t *Table) Drain(dst []Ref) []Ref {
	for e := t.dirty.Swap(nil); e != nil; {
		next := t.tail(e).next.Load()
		t.tail(e).next.Store(nil)
		// Clean before the syncer reads pend: a later admission dirties
		// the entry again and queues it anew.
		e.state.CompareAndSwap(stDirty, stClean)
		dst = append(dst, e)
		e = next
	}
	return dst
}

// MarkDirty queues r for the next Drain again.
func (t *Table) MarkDirty(r Ref) {
	e := r.(*hdr)
	if e == t.overflow || !t.eventual {
		return
	}
	for {
		st := e.state.Load()
		if st != stClean && st != stDead {
			return
		}
		if e.state.CompareAndSwap(st, stDirty) {
			t.push(e)
			return
		}
	}
}

// Key returns r's key.
func (t *Table) Key(r Ref) string { return t.tail(r.(*hdr)).key }

// Pending appends r's unacknowledged counts in buckets still inside the
// window at now.
func (t *Table) Pending(r Ref, now int64, dst []Bucket) []Bucket {
	e := r.(*hdr)
	k := t.geo.Index(now)
	for i := 0; i < t.ring; i++ {
		w := t.pend(e, i).Load()
		c := countOf(w)
		if c == 0 {
			continue
		}
		if d := distance(tagOf(w), k); d < int64(t.span) {
			dst = append(dst, Bucket{Index: k - d, Count: c})
		}
	}
	return dst
}

// Settle records a sync of r: the totals of buckets first, first+1, … as the
// store returned them, and the counts it acknowledged (they leave pend); then
// refreshes r's budget at now.
func (t *Table) Settle(r Ref, now int64, acked []Bucket, first int64, totals []int64) {
	e := r.(*hdr)
	k := t.geo.Index(now)
	for i, tot := range totals {
		j := first + int64(i)
		if j > k || k-j >= int64(t.span) {
			continue // not in this instance's window (clock offset): skip
		}
		t.glob(e, t.slotOf(j)).Store(pack(j, tot))
	}
	e.synced.Add(1) // see plan
	// Budget from the new totals while pend still holds what they now
	// include (counted twice: conservative), then lower pend, then widen.
	t.plan(e, now, nil)
	for _, b := range acked {
		si := t.slotOf(b.Index)
		if b.Index < first {
			// The store had already moved this bucket out of its window
			// and dropped the count (this clock runs a little behind the
			// store's). The count is still real here: keep it in the view,
			// or this instance would admit it again in that bucket.
			t.addGlob(e, si, b.Index, b.Count)
		}
		for {
			w := t.pend(e, si).Load()
			if tagOf(w) != b.Index&tagMask {
				break // the bucket left the window and its slot was reused
			}
			if t.pend(e, si).CompareAndSwap(w, pack(b.Index, countOf(w)-b.Count)) {
				break
			}
		}
	}
	t.plan(e, now, nil)
}

// addGlob adds n to slot si's glob word for bucket j.
func (t *Table) addGlob(e *hdr, si int, j, n int64) {
	g := t.glob(e, si)
	for {
		w := g.Load()
		c := countAt(w, j)
		if tagOf(w) != j&tagMask && distance(tagOf(w), j) < 0 {
			return // the slot holds a newer bucket: j is long gone
		}
		if g.CompareAndSwap(w, pack(j, c+n)) {
			return
		}
	}
}

func (t *Table) idle(e *hdr, k int64) bool {
	span := int64(t.span)
	for i := 0; i < t.ring; i++ {
		if w := t.pend(e, i).Load(); countOf(w) != 0 && distance(tagOf(w), k) < span {
			return false
		}
		if w := t.glob(e, i).Load(); countOf(w) != 0 && distance(tagOf(w), k) < span {
			return false
		}
	}
	return true
}

// Sweep evicts keys with nothing left in the window at now and returns how
// many it removed.
func (t *Table) Sweep(now int64) (removed int) {
	k := t.geo.Index(now)
	t.m.Range(func(key string, e *hdr) bool {
		switch e.state.Load() {
		case stClean:
			if t.idle(e, k) {
				e.state.CompareAndSwap(stClean, stDead)
			}
		case stDead:
			if t.idle(e, k) && e.state.CompareAndSwap(stDead, stGone) {
				t.keys.n.Add(-1)
				t.m.Compute(key, func(old *hdr, loaded bool) (*hdr, bool) {
					return old, !loaded || old == e
				})
				removed++
			}
		}
		return true
	})
	return removed
}

// Len returns the number of keys tracked by this table.
func (t *Table) Len() int { return t.m.Size() }
