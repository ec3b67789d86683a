package localcache

import (
	"fmt"
	"sync/atomic"
)

// ring is the set of slot arrays an entry can have. Each size is a separate
// instantiation, so an entry is one allocation with its slots inline; a ring
// longer than needed costs only memory. Sizes cover every window geometry
// (2 to 65 slots) with little waste for common precisions.
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

// ringSizes lists the sizes in ring, ascending.
var ringSizes = []int{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 21, 25, 33, 41, 49, 57, 65}

func newTable(cfg Config, slots int) (Table, error) {
	for _, n := range ringSizes {
		if n < slots {
			continue
		}
		switch n {
		case 2:
			return newTableOf[[2]atomic.Uint64](cfg), nil
		case 3:
			return newTableOf[[3]atomic.Uint64](cfg), nil
		case 4:
			return newTableOf[[4]atomic.Uint64](cfg), nil
		case 5:
			return newTableOf[[5]atomic.Uint64](cfg), nil
		case 6:
			return newTableOf[[6]atomic.Uint64](cfg), nil
		case 7:
			return newTableOf[[7]atomic.Uint64](cfg), nil
		case 8:
			return newTableOf[[8]atomic.Uint64](cfg), nil
		case 9:
			return newTableOf[[9]atomic.Uint64](cfg), nil
		case 10:
			return newTableOf[[10]atomic.Uint64](cfg), nil
		case 11:
			return newTableOf[[11]atomic.Uint64](cfg), nil
		case 12:
			return newTableOf[[12]atomic.Uint64](cfg), nil
		case 13:
			return newTableOf[[13]atomic.Uint64](cfg), nil
		case 14:
			return newTableOf[[14]atomic.Uint64](cfg), nil
		case 15:
			return newTableOf[[15]atomic.Uint64](cfg), nil
		case 16:
			return newTableOf[[16]atomic.Uint64](cfg), nil
		case 17:
			return newTableOf[[17]atomic.Uint64](cfg), nil
		case 21:
			return newTableOf[[21]atomic.Uint64](cfg), nil
		case 25:
			return newTableOf[[25]atomic.Uint64](cfg), nil
		case 33:
			return newTableOf[[33]atomic.Uint64](cfg), nil
		case 41:
			return newTableOf[[41]atomic.Uint64](cfg), nil
		case 49:
			return newTableOf[[49]atomic.Uint64](cfg), nil
		case 57:
			return newTableOf[[57]atomic.Uint64](cfg), nil
		case 65:
			return newTableOf[[65]atomic.Uint64](cfg), nil
		}
	}
	return nil, fmt.Errorf("%w: %d slots is more than the largest ring", ErrConfig, slots)
}
