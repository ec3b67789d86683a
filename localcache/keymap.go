//go:build !sluice_xsyncmap

package localcache

import (
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
)

// keyMap maps keys to their entries. It stores only the *hdr: an entry holds
// its key just before its hdr (keyOf), so that a lookup reads one bucket,
// then the entry's first cache line, which holds the key, the state and the
// budget that the check reads next. A map that stores its own copy of the
// key beside the pointer (xsync.MapOf keeps a key-and-value record per
// entry) costs a check on a cold key one or two cache misses more, the
// larger part of a check at a million keys. benchmarks/keymap.sh measures
// the two side by side (keymap_xsync.go holds the xsync.MapOf one, built
// with the tag sluice_xsyncmap); docs/performance.md, "The key map", has
// the table that kept this one.
//
// The table is open-addressed: cache-line buckets of seven slots and a
// metadata word, probed linearly. A Load takes no lock and writes nothing;
// insertions and deletions take one mutex, which only new keys and sweeps
// reach. A growing table is rebuilt and swapped: a Load on the old one may
// miss a key inserted since (its caller then takes the locked path, which
// reads the new one), or find an entry deleted since, which the entry's state
// tells (stGone).
type keyMap struct {
	// t and seed are read by every lookup. The padding on both sides keeps
	// them on a cache line of their own: off the line of n and mu, which
	// every insertion and deletion writes, and off whatever the allocator
	// puts before and after the map, so that an insertion on one core does
	// not take the line from the lookups of another (two goroutines on the
	// churn set's draws: 10-20 % off the map's time per operation).
	_    [64]byte
	t    atomic.Pointer[kmTable]
	seed maphash.Seed
	_    [48]byte
	n    atomic.Int64
	mu   sync.Mutex
}

// kmSlots is the number of slots of a bucket: a metadata word and seven
// pointers fill a cache line.
const kmSlots = 7

// A bucket's metadata has one byte per slot (the eighth byte is unused and
// stays kmDeleted): kmEmpty for a slot never used, which ends a probe;
// kmDeleted for one whose entry was deleted; kmFull and seven bits of the
// key's hash for one that holds an entry.
const (
	kmEmpty   = 0x00
	kmDeleted = 0x01
	kmFull    = 0x80
	kmLow     = 0x0101010101010101
	kmHigh    = 0x0080808080808080 // the high bit of slots 0..6
	kmInit    = uint64(kmDeleted) << 56
)

type kmBucket struct {
	meta  atomic.Uint64
	slots [kmSlots]atomic.Pointer[hdr]
}

type kmTable struct {
	// buckets and mask are read by every lookup, used is written by every
	// insertion: padded apart, and from the allocator's neighbours, as in
	// keyMap.
	_       [64]byte
	buckets []kmBucket
	mask    uint64
	_       [32]byte
	used    int // slots not empty (full or deleted): written under keyMap.mu
}

func newKeyMap() *keyMap {
	m := &keyMap{seed: maphash.MakeSeed()}
	m.t.Store(newKMTable(8))
	return m
}

func newKMTable(buckets int) *kmTable {
	t := &kmTable{buckets: make([]kmBucket, buckets), mask: uint64(buckets - 1)}
	for i := range t.buckets {
		t.buckets[i].meta.Store(kmInit)
	}
	return t
}

// matches returns the slots of meta word w whose byte is tag (a high bit per
// slot); it may report a slot that does not match (the caller compares the
// key), never miss one.
func matches(w, tag uint64) uint64 {
	x := w ^ (tag * kmLow)
	return (x - kmLow) & ^x & kmHigh
}

// hasEmpty reports whether meta word w has an empty slot.
func hasEmpty(w uint64) bool { return matches(w, kmEmpty) != 0 }

// hash returns key's hash, and the meta byte of a slot that holds it.
func (m *keyMap) hash(key string) (h, tag uint64) {
	h = maphash.String(m.seed, key)
	return h, h>>57 | kmFull
}

// Load returns key's entry, or nil.
func (m *keyMap) Load(key string) *hdr {
	h, tag := m.hash(key)
	_, _, e := m.t.Load().lookup(h, tag, key)
	return e
}

// lookup returns the bucket and slot that hold key, and its entry; a nil
// entry if t has none.
func (t *kmTable) lookup(h, tag uint64, key string) (*kmBucket, int, *hdr) {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		b := &t.buckets[i]
		w := b.meta.Load()
		for s := matches(w, tag); s != 0; s &= s - 1 {
			j := bits.TrailingZeros64(s) >> 3
			if e := b.slots[j].Load(); e != nil && keyOf(e) == key {
				return b, j, e
			}
		}
		if hasEmpty(w) {
			return nil, 0, nil
		}
	}
}

// LoadOrInsert returns key's entry if there is one; else it inserts the
// entry mk returns (whose key must be key) and returns it, with inserted
// true. mk runs before the lock is taken, so that an allocation (and the
// garbage collector's work it may be charged with) does not hold up the
// other insertions; if another goroutine inserts key meanwhile, mk's entry
// is dropped and key's is returned.
func (m *keyMap) LoadOrInsert(key string, mk func() *hdr) (e *hdr, inserted bool) {
	h, tag := m.hash(key)
	if _, _, e := m.t.Load().lookup(h, tag, key); e != nil {
		return e, false
	}
	e = mk()
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, _, cur := m.t.Load().lookup(h, tag, key); cur != nil {
		return cur, false
	}
	m.insert(h, tag, e)
	return e, true
}

// Replace makes e (whose key must be key) key's entry, if key's entry is old
// or key has none; it reports whether it did. The caller builds e before
// the lock is taken, as LoadOrInsert's mk runs.
func (m *keyMap) Replace(key string, old, e *hdr) bool {
	h, tag := m.hash(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	b, j, cur := m.t.Load().lookup(h, tag, key)
	switch {
	case cur == nil:
		m.insert(h, tag, e)
	case cur == old:
		b.slots[j].Store(e)
	default:
		return false
	}
	return true
}

// Delete removes key's entry if it is e.
func (m *keyMap) Delete(key string, e *hdr) {
	h, tag := m.hash(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.t.Load()
	b, j, cur := t.lookup(h, tag, key)
	if cur == nil || cur != e {
		return
	}
	b.meta.Store(b.meta.Load()&^(0xff<<(8*j)) | kmDeleted<<(8*j))
	b.slots[j].Store(nil)
	if n := m.n.Add(-1); len(t.buckets) > 8 && n*8 < int64(len(t.buckets)*kmSlots) {
		m.rebuild(t, int(n)) // mostly deleted slots: shrink
	}
}

// insert adds e, whose key is not in the map, under m.mu; it rebuilds a table
// three quarters used first.
func (m *keyMap) insert(h, tag uint64, e *hdr) {
	t := m.t.Load()
	if (t.used+1)*4 > len(t.buckets)*kmSlots*3 {
		t = m.rebuild(t, int(m.n.Load())+1)
	}
	t.put(h, tag, e)
	m.n.Add(1)
}

// put stores e in the first free slot of its probe (under m.mu).
func (t *kmTable) put(h, tag uint64, e *hdr) {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		b := &t.buckets[i]
		w := b.meta.Load()
		if free := ^w & kmHigh; free != 0 {
			j := bits.TrailingZeros64(free) >> 3
			if w>>(8*j)&0xff == kmEmpty {
				t.used++
			}
			b.slots[j].Store(e) // before the tag: a Load that sees the tag sees e
			b.meta.Store(w&^(0xff<<(8*j)) | tag<<(8*j))
			return
		}
	}
}

// rebuild copies t's entries into a new table sized for n entries (at most
// three eighths used) and publishes it, under m.mu.
func (m *keyMap) rebuild(t *kmTable, n int) *kmTable {
	buckets := 8
	for buckets*kmSlots*3 < n*8 {
		buckets *= 2
	}
	nt := newKMTable(buckets)
	for i := range t.buckets {
		b := &t.buckets[i]
		for j := range b.slots {
			if e := b.slots[j].Load(); e != nil {
				h, tag := m.hash(keyOf(e))
				nt.put(h, tag, e)
			}
		}
	}
	m.t.Store(nt)
	return nt
}

// Range calls f with every entry until f returns false. An entry inserted
// or deleted meanwhile may be seen or not.
func (m *keyMap) Range(f func(e *hdr) bool) {
	t := m.t.Load()
	for i := range t.buckets {
		b := &t.buckets[i]
		for j := range b.slots {
			if e := b.slots[j].Load(); e != nil && !f(e) {
				return
			}
		}
	}
}

// Len returns the number of entries.
func (m *keyMap) Len() int { return int(m.n.Load()) }
