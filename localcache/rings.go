package localcache

import "sync/atomic"

// entry is the memory layout of one key's state in an Eventual table, with a
// ring of len(A) slots: a hdr, then pend[len(A)], then glob[len(A)], then the
// tail (dirty-list link and key). Only
// allocation uses it (one type per ring size, so an entry is one allocation
// with its slots inline and the garbage collector knows where its pointers
// are); everything else goes through the *hdr at its start.
type entry[A ring] struct {
	hdr
	pend A
	glob A
	tail
}

// localEntry is the layout in a Local table: nothing is ever pulled from a
// store, so there is no glob.
type localEntry[A ring] struct {
	hdr
	pend A
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
// function that allocates entries with it (with glob words if withGlob); nil
// if there is none.
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

func alloc[A ring](key string) *hdr {
	e := &entry[A]{}
	e.key = key
	return &e.hdr
}

func allocLocal[A ring](string) *hdr {
	return &(&localEntry[A]{}).hdr
}
