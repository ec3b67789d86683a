package localcache

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/rawmem"
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
// is one allocation (see entryAllocator): the key, a hdr, then its ring,
// pend[0..R) then, in an Eventual table, glob[0..R) and a tail; each slot word
// an atomic uint64. A *hdr is a pointer to the whole entry: the key, slot
// words and the tail are reached by offset from it (keyOf, Table.pend,
// Table.glob, Table.tail), so the hot path needs no knowledge of the ring size
// and no generics. After its key (24 or 64 bytes; a longer key is copied
// apart), an entry takes 24 bytes plus 8 per slot in a Local table, 56 bytes
// plus 16 per slot in an Eventual one: see entry in rings.go.
type hdr struct {
	state  atomic.Uint32
	synced atomic.Uint32 // bumped by Settle once it has stored totals, and by Release
	budget atomic.Uint64 // tag: bucket+generation; count: most the current pend may reach
	room   atomic.Uint64 // same tag; count: Limit minus the estimate without the current pend
}

// tail is what only an Eventual table's entries carry, after their ring: the
// dirty-list link, the leases and the early-list link, for the syncer.
type tail struct {
	next atomic.Pointer[hdr]
	// lease holds the store's grants (lease.go), one per bucket parity (a
	// lease of bucket j is in lease[j&1]), so that the next bucket's lease
	// can arrive while the current one is in use: tag the bucket it is
	// for, count its units; 0 when the slot holds none.
	lease [2]atomic.Uint64
	// early is the early-list link (early.go): nil while the key has not
	// asked for an early sync, earlyBusy once the syncer has taken it off
	// the list, until its sync settles.
	early atomic.Pointer[hdr]
}

// hdrSize is the offset of pend[0] in an entry, after the hdr: its size,
// which init checks.
const hdrSize uintptr = 24

func init() {
	if rawmem.Sizeof[hdr]() != hdrSize {
		panic("localcache: hdrSize is not the size of a hdr")
	}
}

// pend returns slot i's pend word of e.
func (t *Table) pend(e *hdr, i int) *atomic.Uint64 {
	return rawmem.At[atomic.Uint64](e, hdrSize+uintptr(i)*8)
}

// glob returns slot i's glob word of e. A Local table's entries have none:
// it returns a word that stays zero (a Local table never stores totals).
func (t *Table) glob(e *hdr, i int) *atomic.Uint64 {
	if !t.eventual {
		return &noGlob
	}
	return rawmem.At[atomic.Uint64](e, t.globOff+uintptr(i)*8)
}

// tail returns e's tail (Eventual tables only).
func (t *Table) tail(e *hdr) *tail {
	return rawmem.At[tail](e, t.tailOff)
}

// noGlob is the glob word of every slot of a Local table's entries; nothing
// writes it.
var noGlob atomic.Uint64

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

// push queues e on the dirty list.
func (t *Table) push(e *hdr) {
	for {
		h := t.dirty.Load()
		t.tail(e).next.Store(h)
		if t.dirty.CompareAndSwap(h, e) {
			return
		}
	}
}
