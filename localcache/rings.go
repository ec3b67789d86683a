package localcache

import "sync/atomic"

// entry is the memory layout of one key's state with a ring of len(A) slots:
// a hdr, then pend[len(A)], then glob[len(A)]. Only allocation uses it (one
// type per ring size, so an entry is one allocation with its slots inline and
// the garbage collector knows where its pointers are); everything else goes
// through the *hdr at its start.
type entry[A ring] struct {
	hdr
	pend A
	glob A
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
// function that allocates entries with it; nil if there is none.
func entryAllocator(slots int) (int, func(key string) *hdr) {
	switch {
	case slots <= 2:
		return 2, alloc[[2]atomic.Uint64]
	case slots <= 3:
		return 3, alloc[[3]atomic.Uint64]
	case slots <= 4:
		return 4, alloc[[4]atomic.Uint64]
	case slots <= 5:
		return 5, alloc[[5]atomic.Uint64]
	case slots <= 6:
		return 6, alloc[[6]atomic.Uint64]
	case slots <= 7:
		return 7, alloc[[7]atomic.Uint64]
	case slots <= 8:
		return 8, alloc[[8]atomic.Uint64]
	case slots <= 9:
		return 9, alloc[[9]atomic.Uint64]
	case slots <= 10:
		return 10, alloc[[10]atomic.Uint64]
	case slots <= 11:
		return 11, alloc[[11]atomic.Uint64]
	case slots <= 12:
		return 12, alloc[[12]atomic.Uint64]
	case slots <= 13:
		return 13, alloc[[13]atomic.Uint64]
	case slots <= 14:
		return 14, alloc[[14]atomic.Uint64]
	case slots <= 15:
		return 15, alloc[[15]atomic.Uint64]
	case slots <= 16:
		return 16, alloc[[16]atomic.Uint64]
	case slots <= 17:
		return 17, alloc[[17]atomic.Uint64]
	case slots <= 21:
		return 21, alloc[[21]atomic.Uint64]
	case slots <= 25:
		return 25, alloc[[25]atomic.Uint64]
	case slots <= 33:
		return 33, alloc[[33]atomic.Uint64]
	case slots <= 41:
		return 41, alloc[[41]atomic.Uint64]
	case slots <= 49:
		return 49, alloc[[49]atomic.Uint64]
	case slots <= 57:
		return 57, alloc[[57]atomic.Uint64]
	case slots <= 65:
		return 65, alloc[[65]atomic.Uint64]
	}
	return 0, nil
}

func alloc[A ring](key string) *hdr {
	e := &entry[A]{}
	e.key = key
	return &e.hdr
}
