package localcache

import (
	"math"
	"strings"
	"sync/atomic"
	"time"

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

// entry is one key's state; A is its ring of slots. Its size is 48 bytes plus
// 16 per slot, in a single allocation.
type entry[A ring] struct {
	state  atomic.Uint32
	synced atomic.Uint32 // bumped by Settle once it has stored totals
	budget atomic.Uint64 // tag: bucket+generation; count: most the current pend may reach
	room   atomic.Uint64 // same tag; count: Limit minus the estimate without the current pend
	next   atomic.Pointer[entry[A]]
	key    string
	pend   A
	glob   A
}

func (*entry[A]) ref() {}

// table is a Table whose entries have rings of type A.
type table[A ring] struct {
	// Written once a tick, read by every check.
	pos   atomic.Uint64 // k & tagMask | budget tag << 24 | slot << 48
	now   atomic.Int64
	reset atomic.Int64

	m        *xsync.MapOf[string, *entry[A]]
	geo      window.Sliding
	limit    int64
	ring     int // len(A)
	span     int // buckets in a window: B+1, or 1 for a fixed window
	eventual bool
	ok       uint32 // state of an entry that needs nothing after an admission
	keys     *Keys
	overflow *entry[A]

	gen    atomic.Uint32
	capv   atomic.Int64
	share  atomic.Int64
	health atomic.Uint32

	// The dirty list head is written by checks that dirty a clean key; keep it
	// off the cache line every check reads (pos, now, reset).
	_     [64]byte
	dirty atomic.Pointer[entry[A]]
	_     [56]byte
}

func newTableOf[A ring](cfg Config) *table[A] {
	t := &table[A]{
		m:        xsync.NewMapOf[string, *entry[A]](),
		geo:      cfg.Geometry,
		limit:    cfg.Limit,
		span:     cfg.Geometry.Span(),
		eventual: cfg.Eventual,
		ok:       stClean,
		keys:     cfg.Keys,
	}
	if t.eventual {
		t.ok = stDirty
	}
	t.overflow = &entry[A]{}
	t.ring = len(t.overflow.pend)
	t.overflow.state.Store(t.ok)
	t.capv.Store(NoCap)
	t.share.Store(cfg.Limit)
	return t
}

func (t *table[A]) slotOf(j int64) int {
	r := int64(t.ring)
	return int((j%r + r) % r)
}

func (t *table[A]) Tick(now int64) {
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
		if t.pos.CompareAndSwap(old, uint64(k&tagMask)|uint64(tag)<<24|uint64(t.slotOf(k))<<48) {
			return
		}
	}
}

func (t *table[A]) Now() int64 { return t.now.Load() }

// genStride is what SetLimits adds to the generation. A budget's tag is
// bucket + generation (mod 2^24): with a stride of 1, the budget a check at
// bucket k+1 cached under generation g would be valid for bucket k under g+1.
// With 2^12+1, the tags of buckets less than 4097 apart collide only across
// 4095 or more generations.
const genStride = 1<<12 + 1

func (t *table[A]) SetLimits(l Limits) {
	t.capv.Store(l.Cap)
	t.share.Store(l.Share)
	t.health.Store(uint32(l.Health))
	t.gen.Add(genStride)
	t.Tick(t.now.Load())
}

func (t *table[A]) Limits() Limits {
	return Limits{Cap: t.capv.Load(), Share: t.share.Load(), Health: Health(t.health.Load())}
}

func (t *table[A]) Allow(key string, n int64) Verdict {
	return t.allow(key, n, t.pos.Load(), t.now.Load(), time.Duration(t.reset.Load()))
}

func (t *table[A]) AllowAt(key string, now int64, n int64) Verdict {
	k := t.geo.Index(now)
	tag := (k + int64(t.gen.Load())) & tagMask
	p := uint64(k&tagMask) | uint64(tag)<<24 | uint64(t.slotOf(k))<<48
	return t.allow(key, n, p, now, t.geo.ResetAfter(now))
}

// allow is the hot path: a valid budget and room in it cost one map load, two
// loads and one atomic add on the entry, and a load of its state.
func (t *table[A]) allow(key string, n int64, p uint64, now int64, reset time.Duration) Verdict {
	tag := int64(p>>24) & tagMask
	s := int(p >> 48)
	for {
		e := t.lookup(key)
		if bw := e.budget.Load(); tagOf(bw) == tag {
			// A budget tagged for this bucket is only stored after pend[s]
			// holds this bucket, so the addition lands in the right one.
			if max := countOf(bw); countOf(e.pend[s].Load())+n <= max {
				c := countOf(e.pend[s].Add(uint64(n)))
				if c <= max {
					if st := e.state.Load(); st != t.ok && !t.settleState(e, st) {
						e.pend[s].Add(-uint64(n))
						continue
					}
					rem := countOf(e.room.Load()) - c
					return Verdict{Status: Allowed, Overflow: e == t.overflow, Remaining: max0(rem), ResetAfter: reset}
				}
				e.pend[s].Add(-uint64(n))
			}
		}
		if v, ok := t.slow(e, now, n, nil); ok {
			return v
		}
	}
}

func max0(x int64) int64 {
	if x < 0 {
		return 0
	}
	return x
}

func (t *table[A]) lookup(key string) *entry[A] {
	if e, ok := t.m.Load(key); ok {
		return e
	}
	if t.keys.n.Load() >= t.keys.max {
		t.keys.full.Store(true)
		return t.overflow
	}
	k := strings.Clone(key) // the caller's string may live in a reused buffer
	e, loaded := t.m.LoadOrCompute(k, func() *entry[A] { return &entry[A]{key: k} })
	if !loaded {
		t.keys.n.Add(1)
	}
	return e
}

// settleState brings a just-admitted-to entry into its live state: it queues a
// clean Eventual entry for the syncer and revives a dead one. It returns false
// if the entry is gone: the caller must undo its addition and start over.
func (t *table[A]) settleState(e *entry[A], st uint32) bool {
	for {
		switch st {
		case t.ok:
			return true
		case stGone:
			t.replace(e)
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

// replace installs a fresh entry for a gone entry's key, unless another one
// already did.
func (t *table[A]) replace(e *entry[A]) {
	t.m.Compute(e.key, func(old *entry[A], loaded bool) (*entry[A], bool) {
		if loaded && old != e {
			return old, false
		}
		t.keys.n.Add(1)
		return &entry[A]{key: e.key}, false
	})
}

func (t *table[A]) push(e *entry[A]) {
	for {
		h := t.dirty.Load()
		e.next.Store(h)
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
func (t *table[A]) scan(e *entry[A], k int64, s int, phase float64) (v view) {
	last := t.span - 1
	for i := 0; i < t.span; i++ {
		si := s - i
		if si < 0 {
			si += t.ring
		}
		j := k - int64(i)
		p := countAt(e.pend[si].Load(), j)
		g := countAt(e.glob[si].Load(), j)
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
func (t *table[A]) rotate(e *entry[A], k int64, s int) bool {
	for {
		w := e.pend[s].Load()
		tag := tagOf(w)
		if tag == k&tagMask {
			return true
		}
		if distance(tag, k) < 0 && countOf(w) != 0 {
			return false
		}
		if e.pend[s].CompareAndSwap(w, pack(k, 0)) {
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
func (t *table[A]) plan(e *entry[A], now int64, force *Health) plan {
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
func (t *table[A]) slow(e *entry[A], now int64, n int64, force *Health) (v Verdict, ok bool) {
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
		w := e.pend[p.s].Load()
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
		if e.pend[p.s].CompareAndSwap(w, w+uint64(n)) {
			if st := e.state.Load(); st != t.ok && !t.settleState(e, st) {
				e.pend[p.s].Add(-uint64(n))
				return v, false
			}
			v.Status, v.Remaining = Allowed, max0(p.room-c)
			return v, true
		}
	}
	cur := countOf(e.pend[p.s].Load()) + n
	if p.health == Healthy && !p.local && cur <= p.room {
		v.Status, v.Ref = OverCap, e
		return v, true
	}
	v.Status = OverLimit
	if cur > p.room {
		v.RetryAfter = t.geo.RetryAfter(now, t.limit, n, func(j int64) int64 {
			si := t.slotOf(j)
			return countAt(e.pend[si].Load(), j) + countAt(e.glob[si].Load(), j)
		})
	}
	if p.health == FailLocal && cur > p.shareBudget {
		share := t.share.Load()
		ra := v.ResetAfter
		if n <= share {
			ra = t.geo.RetryAfter(now, share, n, func(j int64) int64 {
				return countAt(e.pend[t.slotOf(j)].Load(), j)
			})
		}
		if v.RetryAfter >= 0 {
			v.RetryAfter = max(v.RetryAfter, ra)
		}
	}
	return v, true
}

func (t *table[A]) AllowDegraded(key string, now int64, n int64, h Health) Verdict {
	for {
		if v, ok := t.slow(t.lookup(key), now, n, &h); ok {
			return v
		}
	}
}

func (t *table[A]) Ref(key string) (Ref, bool) {
	e := t.lookup(key)
	return e, e != t.overflow
}

func (t *table[A]) Estimate(key string, now int64) (est float64, own int64, ok bool) {
	e, ok := t.m.Load(key)
	if !ok {
		return 0, 0, false
	}
	k := t.geo.Index(now)
	s := t.slotOf(k)
	v := t.scan(e, k, s, t.geo.Phase(now))
	cur := countAt(e.pend[s].Load(), k)
	return v.others + float64(cur), v.div + cur, true
}

func (t *table[A]) Drain(dst []Ref) []Ref {
	for e := t.dirty.Swap(nil); e != nil; {
		next := e.next.Load()
		e.next.Store(nil)
		// Clean before the syncer reads pend: a later admission dirties
		// the entry again and queues it anew.
		e.state.CompareAndSwap(stDirty, stClean)
		dst = append(dst, e)
		e = next
	}
	return dst
}

func (t *table[A]) MarkDirty(r Ref) {
	e := r.(*entry[A])
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

func (t *table[A]) Key(r Ref) string { return r.(*entry[A]).key }

func (t *table[A]) Pending(r Ref, now int64, dst []Bucket) []Bucket {
	e := r.(*entry[A])
	k := t.geo.Index(now)
	for i := 0; i < t.ring; i++ {
		w := e.pend[i].Load()
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

func (t *table[A]) Settle(r Ref, now int64, acked []Bucket, first int64, totals []int64) {
	e := r.(*entry[A])
	k := t.geo.Index(now)
	for i, tot := range totals {
		j := first + int64(i)
		if j > k || k-j >= int64(t.span) {
			continue // not in this instance's window (clock offset): skip
		}
		e.glob[t.slotOf(j)].Store(pack(j, tot))
	}
	e.synced.Add(1) // see plan
	// Budget from the new totals while pend still holds what they now
	// include (counted twice: conservative), then lower pend, then widen.
	t.plan(e, now, nil)
	for _, b := range acked {
		si := t.slotOf(b.Index)
		for {
			w := e.pend[si].Load()
			if tagOf(w) != b.Index&tagMask {
				break // the bucket left the window and its slot was reused
			}
			if e.pend[si].CompareAndSwap(w, pack(b.Index, countOf(w)-b.Count)) {
				break
			}
		}
	}
	t.plan(e, now, nil)
}

func (t *table[A]) idle(e *entry[A], k int64) bool {
	span := int64(t.span)
	for i := 0; i < t.ring; i++ {
		if w := e.pend[i].Load(); countOf(w) != 0 && distance(tagOf(w), k) < span {
			return false
		}
		if w := e.glob[i].Load(); countOf(w) != 0 && distance(tagOf(w), k) < span {
			return false
		}
	}
	return true
}

func (t *table[A]) Sweep(now int64) (removed int) {
	k := t.geo.Index(now)
	t.m.Range(func(key string, e *entry[A]) bool {
		switch e.state.Load() {
		case stClean:
			if t.idle(e, k) {
				e.state.CompareAndSwap(stClean, stDead)
			}
		case stDead:
			if t.idle(e, k) && e.state.CompareAndSwap(stDead, stGone) {
				t.keys.n.Add(-1)
				t.m.Compute(key, func(old *entry[A], loaded bool) (*entry[A], bool) {
					return old, !loaded || old == e
				})
				removed++
			}
		}
		return true
	})
	return removed
}

func (t *table[A]) Len() int { return t.m.Size() }
