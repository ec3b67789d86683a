package window

import (
	"fmt"
	"math"
)

// tolerance is the slack of the admit test, in units of count. Only the
// oldest bucket's share of an estimate is a float, (1−φ)·c[k−B]: the weight
// rounds, so a share that is an integer in exact arithmetic can come out a
// few ulps above it, and a check that fits exactly would be denied. The
// tolerance absorbs that rounding; it admits nothing a whole unit beyond the
// limit, because counts and costs are integers.
const tolerance = 1e-9

// Estimate is a sliding-window estimate in its two parts: Whole, the counts
// of the buckets counted whole (exact, an integer), and Weighted, the oldest
// bucket's count times its weight 1−φ (0 unless the window is weighted: the
// oldest bucket then counts whole, in Whole). Keeping them
// apart makes the admit test exact integer arithmetic plus one float floor,
// the same wherever it runs, whatever order the buckets were summed in.
type Estimate struct {
	// Whole is the sum of the buckets counted whole.
	Whole int64
	// Weighted is the weighted oldest bucket's share (0 unless weighted).
	Weighted float64
}

// Value returns the estimate as one number, Whole + Weighted.
func (e Estimate) Value() float64 { return float64(e.Whole) + e.Weighted }

// Room returns how many units fit under limit: limit − Whole +
// ⌊tolerance − Weighted⌋. It is the admit test of every part of sluice: a
// cost n fits if and only if n ≤ Room(limit). The store's scripts run the
// same test (LuaRoom). Because Whole is an integer, a part of it can move to
// the other side: with Whole = a + b, n fits if and only if b + n ≤ Room of
// the estimate without b, which is how a cached budget stays exact.
func (e Estimate) Room(limit int64) int64 {
	return limit - e.Whole + int64(math.Floor(tolerance-e.Weighted))
}

// LuaRoom is Room as a Lua function, room(whole, weighted, limit), for the
// store's scripts: they put it in front of their source, so that the store
// admits exactly what the instances would.
var LuaRoom = fmt.Sprintf("local function room(whole, weighted, limit) return limit - whole + math.floor(%.17g - weighted) end\n", tolerance)

// Bucket is a count in one sub-window.
type Bucket struct {
	// Index is the bucket index: ⌊t/w⌋ on the store clock.
	Index int64
	// Count is what the bucket holds.
	Count int64
}
