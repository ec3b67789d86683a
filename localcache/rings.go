package localcache

import (
	"strings"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/rawmem"
)

// entry is the memory layout of one key's state in an Eventual table, with a
// ring of len(A) slots: the key (kb, K), a hdr, then pend[len(A)], then
// glob[len(A)], then the tail (dirty-list and early-list links, leases). Only
// allocation uses it (one type per ring size and key buffer, so an entry is
// one allocation with its slots inline and the garbage collector knows where
// its pointers are); everything else goes through the *hdr after the key:
// the offsets from it are the same whatever K, and keyOf reads the key back.
//
// The key sits just before the hdr, so that the key map (keymap.go), which
// stores only the *hdr, compares a looked-up key with bytes on the cache line
// that the check reads next for the budget. At the default precision (11
// slots) with a key of at most 23 bytes, an Eventual entry is 256 bytes, the
// 256-byte size class, whose objects start on a cache line: the key, the
// state, the budget and the room share the first one.
type entry[A ring, K keyBuf] struct {
	kb K
	hdr
	pend A
	glob A
	tail
}

// localEntry is the layout in a Local table: nothing is ever pulled from a
// store, so there is no glob and no tail.
type localEntry[A ring, K keyBuf] struct {
	kb K
	hdr
	pend A
}

// The key buffers. A short or mid key's bytes end one byte before the hdr;
// that last byte holds its length. A longer key is copied apart, and its
// buffer holds the copy and the mark longKey in that byte.
type (
	shortKey [24]byte // keys of at most 23 bytes
	midKey   [64]byte // keys of at most 63 bytes
	farKey   struct {
		s    string
		_    [7]byte
		mark uint8 // longKey
	}
)

// keyBuf is the set of key buffers an entry can have.
type keyBuf interface {
	shortKey | midKey | farKey
}

// longKey marks a key kept apart (farKey): no inline key is that long.
const longKey = 0xff

// keyOf returns e's key (the entry's copy). The last byte before the hdr
// tells which key buffer the entry has (byKeyLen): the length of an inline
// key, whose bytes end just before that byte, or longKey.
func keyOf(e *hdr) string {
	lb := rawmem.Before[uint8](e)
	n := int(*lb)
	if n == longKey {
		return rawmem.Before[farKey](e).s
	}
	return rawmem.StringBefore(lb, n) // an entry's key is never written again
}

// putKey copies key into kb, which must hold it, as keyOf reads it.
func putKey[K keyBuf](kb *K, key string) {
	var b []byte
	switch kb := any(kb).(type) {
	case *farKey:
		kb.s, kb.mark = strings.Clone(key), longKey
		return
	case *shortKey:
		b = kb[:]
	case *midKey:
		b = kb[:]
	}
	b[len(b)-1] = uint8(len(key))
	copy(b[len(b)-1-len(key):], key)
}

// ring is the set of slot arrays an entry can have. A ring longer than needed
// costs only memory; the sizes cover every window geometry (2 to 65 slots)
// with little waste for common precisions.
type ring interface {
	[2]atomic.Uint64 |
		[3]atomic.Uint64 |
		[4]atomic.Uint64 |
		[5]atomic.Uint64 |
		[6]atomic.Uint64 |
		[7]atomic.Uint64 |
		[8]atomic.Uint64 |
		[9]atomic.Uint64 |
		[10]atomic.Uint64 |
		[11]atomic.Uint64 |
		[12]atomic.Uint64 |
		[13]atomic.Uint64 |
		[14]atomic.Uint64 |
		[15]atomic.Uint64 |
		[16]atomic.Uint64 |
		[17]atomic.Uint64 |
		[21]atomic.Uint64 |
		[25]atomic.Uint64 |
		[33]atomic.Uint64 |
		[41]atomic.Uint64 |
		[49]atomic.Uint64 |
		[57]atomic.Uint64 |
		[65]atomic.Uint64
}

// entryAllocator returns the smallest ring size of at least slots, and a
// function that allocates entries with it (with glob words if withGlob) for
// a key; nil if there is none.
func entryAllocator(slots int, withGlob bool) (int, func(key string) *hdr) {
	switch {
	case slots <= 2:
		if withGlob {
			return 2, alloc[[2]atomic.Uint64]
		}
		return 2, allocLocal[[2]atomic.Uint64]
	case slots <= 3:
		if withGlob {
			return 3, alloc[[3]atomic.Uint64]
		}
		return 3, allocLocal[[3]atomic.Uint64]
	case slots <= 4:
		if withGlob {
			return 4, alloc[[4]atomic.Uint64]
		}
		return 4, allocLocal[[4]atomic.Uint64]
	case slots <= 5:
		if withGlob {
			return 5, alloc[[5]atomic.Uint64]
		}
		return 5, allocLocal[[5]atomic.Uint64]
	case slots <= 6:
		if withGlob {
			return 6, alloc[[6]atomic.Uint64]
		}
		return 6, allocLocal[[6]atomic.Uint64]
	case slots <= 7:
		if withGlob {
			return 7, alloc[[7]atomic.Uint64]
		}
		return 7, allocLocal[[7]atomic.Uint64]
	case slots <= 8:
		if withGlob {
			return 8, alloc[[8]atomic.Uint64]
		}
		return 8, allocLocal[[8]atomic.Uint64]
	case slots <= 9:
		if withGlob {
			return 9, alloc[[9]atomic.Uint64]
		}
		return 9, allocLocal[[9]atomic.Uint64]
	case slots <= 10:
		if withGlob {
			return 10, alloc[[10]atomic.Uint64]
		}
		return 10, allocLocal[[10]atomic.Uint64]
	case slots <= 11:
		if withGlob {
			return 11, alloc[[11]atomic.Uint64]
		}
		return 11, allocLocal[[11]atomic.Uint64]
	case slots <= 12:
		if withGlob {
			return 12, alloc[[12]atomic.Uint64]
		}
		return 12, allocLocal[[12]atomic.Uint64]
	case slots <= 13:
		if withGlob {
			return 13, alloc[[13]atomic.Uint64]
		}
		return 13, allocLocal[[13]atomic.Uint64]
	case slots <= 14:
		if withGlob {
			return 14, alloc[[14]atomic.Uint64]
		}
		return 14, allocLocal[[14]atomic.Uint64]
	case slots <= 15:
		if withGlob {
			return 15, alloc[[15]atomic.Uint64]
		}
		return 15, allocLocal[[15]atomic.Uint64]
	case slots <= 16:
		if withGlob {
			return 16, alloc[[16]atomic.Uint64]
		}
		return 16, allocLocal[[16]atomic.Uint64]
	case slots <= 17:
		if withGlob {
			return 17, alloc[[17]atomic.Uint64]
		}
		return 17, allocLocal[[17]atomic.Uint64]
	case slots <= 21:
		if withGlob {
			return 21, alloc[[21]atomic.Uint64]
		}
		return 21, allocLocal[[21]atomic.Uint64]
	case slots <= 25:
		if withGlob {
			return 25, alloc[[25]atomic.Uint64]
		}
		return 25, allocLocal[[25]atomic.Uint64]
	case slots <= 33:
		if withGlob {
			return 33, alloc[[33]atomic.Uint64]
		}
		return 33, allocLocal[[33]atomic.Uint64]
	case slots <= 41:
		if withGlob {
			return 41, alloc[[41]atomic.Uint64]
		}
		return 41, allocLocal[[41]atomic.Uint64]
	case slots <= 49:
		if withGlob {
			return 49, alloc[[49]atomic.Uint64]
		}
		return 49, allocLocal[[49]atomic.Uint64]
	case slots <= 57:
		if withGlob {
			return 57, alloc[[57]atomic.Uint64]
		}
		return 57, allocLocal[[57]atomic.Uint64]
	case slots <= 65:
		if withGlob {
			return 65, alloc[[65]atomic.Uint64]
		}
		return 65, allocLocal[[65]atomic.Uint64]
	}
	return 0, nil
}

// alloc returns a new Eventual entry with ring A for key, holding a copy of
// key (keyOf).
func alloc[A ring](key string) *hdr {
	return byKeyLen(key, allocIn[A, shortKey], allocIn[A, midKey], allocIn[A, farKey])
}

// allocLocal is alloc for a Local table.
func allocLocal[A ring](key string) *hdr {
	return byKeyLen(key, allocLocalIn[A, shortKey], allocLocalIn[A, midKey], allocLocalIn[A, farKey])
}

// byKeyLen allocates with the allocator of the smallest key buffer that
// holds key.
func byKeyLen(key string, short, mid, far func(string) *hdr) *hdr {
	switch {
	case len(key) < len(shortKey{}):
		return short(key)
	case len(key) < len(midKey{}):
		return mid(key)
	}
	return far(key)
}

func allocIn[A ring, K keyBuf](key string) *hdr {
	e := &entry[A, K]{}
	putKey(&e.kb, key)
	return &e.hdr
}

func allocLocalIn[A ring, K keyBuf](key string) *hdr {
	e := &localEntry[A, K]{}
	putKey(&e.kb, key)
	return &e.hdr
}
