package localcache

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/rawmem"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// TestTimeBehindRing: a check whose bucket's slot already holds a newer
// bucket with counts (its time is more than a ring behind another check's)
// is denied and not counted; within a window behind, checks still work.
func TestTimeBehindRing(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 2) // span 3, ring 3
	tb := mkTable(t, geo, 10, false)
	t0 := bucketStart(geo, 0)
	require.Equal(t, verdict.Allowed, tb.AllowAt("k", t0, 1).Status)
	ahead := t0 + 3*geo.Sub() // same slot as t0
	require.Equal(t, verdict.Allowed, tb.AllowAt("k", ahead, 2).Status)
	v := tb.AllowAt("k", t0, 1)
	require.Equal(t, verdict.OverLimit, v.Status)
	_, own, _ := tb.estimate("k", ahead)
	require.Equal(t, int64(2), own)
	// One bucket behind the newest is fine.
	require.Equal(t, verdict.Allowed, tb.AllowAt("k", ahead-geo.Sub(), 1).Status)
	_, own, _ = tb.estimate("k", ahead)
	require.Equal(t, int64(3), own)
}

// TestSettleClamps: an ack larger than what is pending (a duplicate ack)
// leaves zero, not a wrapped count; totals beyond the 40-bit counter
// saturate, and the table then denies everything.
func TestSettleClamps(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 2)
	tb := mkTable(t, geo, 100, true)
	now := bucketStart(geo, 0)
	k := geo.Index(now)
	require.Equal(t, verdict.Allowed, tb.AllowAt("k", now, 3).Status)
	r, _ := tb.ref("k")
	tb.syncView().Settle(r, now, []Bucket{{Index: k, Count: 5}}, k, []int64{3}, Bucket{})
	require.Empty(t, tb.syncView().Pending(r, now, nil))
	est, own, _ := tb.estimate("k", now)
	require.Zero(t, own)
	require.Equal(t, 3.0, est)

	tb.syncView().Settle(r, now, nil, k-2, []int64{1 << 45, 1 << 45, 1 << 45}, Bucket{})
	est, _, _ = tb.estimate("k", now)
	require.Equal(t, float64(3*maxCount), est)
	v := tb.AllowAt("k", now, 1)
	require.Equal(t, verdict.OverLimit, v.Status)
	require.Zero(t, v.Remaining)
}

// TestFastPathFindsDeadOrGone: a key with a valid budget but nothing counted
// (its last check was denied) can be swept within the bucket; a check that
// then takes the fast path revives a dead entry, and moves to a fresh entry if
// it finds it gone.
func TestFastPathFindsDeadOrGone(t *testing.T) {
	t.Parallel()
	geo := window.NewFixed(time.Minute)
	keys := NewKeys(10)
	tb := mustTable(t, Config{Geometry: geo, Limit: 10, Keys: keys})
	now := bucketStart(geo, 0)
	for _, key := range []string{"dead", "gone"} {
		require.Equal(t, verdict.OverLimit, tb.AllowAt(key, now, 11).Status) // caches a budget, counts nothing
	}
	require.Zero(t, tb.Sweep(now))
	dead := tb.m.Load("dead")
	gone := tb.m.Load("gone")
	require.Equal(t, stDead, dead.state.Load())
	// The sweeper's second pass has marked "gone" but not yet removed it.
	require.True(t, gone.state.CompareAndSwap(stDead, stGone))
	keys.n.Add(-1)

	v := tb.AllowAt("dead", now, 2)
	require.Equal(t, verdict.Allowed, v.Status)
	require.Equal(t, int64(8), v.Remaining)
	require.Equal(t, stClean, dead.state.Load(), "revived")

	v = tb.AllowAt("gone", now, 3)
	require.Equal(t, verdict.Allowed, v.Status)
	require.Equal(t, int64(7), v.Remaining)
	fresh := tb.m.Load("gone")
	require.NotSame(t, gone, fresh)
	require.Zero(t, countOf(tb.pend(gone, tb.slotOf(geo.Index(now))).Load()), "undone on the gone entry")
	_, own, _ := tb.estimate("gone", now)
	require.Equal(t, int64(3), own)
	require.Equal(t, int64(2), keys.tracked())
	require.Equal(t, 2, tb.size())
}

// TestEntrySize pins the documented entry layout: the key (24 or 64 bytes
// for keys of at most 23 or 63 bytes, or 24 bytes holding a longer key's
// copy), a 24-byte header, then pend, then in an Eventual entry glob and the
// 32-byte tail (dirty link, two lease words, early link): 24 bytes plus 8
// per slot for a Local entry, 56 plus 16 per slot for an Eventual one, after
// the key (256 bytes at the default precision with a short key, the 256-byte
// size class), each in one allocation; keyOf reads back every key.
func TestEntrySize(t *testing.T) {
	t.Parallel()
	require.Equal(t, uintptr(24), hdrSize)
	require.Equal(t, uintptr(24), rawmem.Sizeof[farKey]())
	require.Equal(t, uintptr(24+56+16*2), rawmem.Sizeof[entry[[2]atomic.Uint64, shortKey]]())
	require.Equal(t, uintptr(24+56+16*65), rawmem.Sizeof[entry[[65]atomic.Uint64, farKey]]())
	require.Equal(t, uintptr(256), rawmem.Sizeof[entry[[11]atomic.Uint64, shortKey]](), "the 256-byte size class")
	var e entry[[11]atomic.Uint64, midKey]
	require.Equal(t, uintptr(64), rawmem.Offset(&e, &e.hdr))
	require.Equal(t, 64+hdrSize, rawmem.Offset(&e, &e.pend))
	require.Equal(t, 64+hdrSize+11*8, rawmem.Offset(&e, &e.glob))
	require.Equal(t, 64+hdrSize+11*16, rawmem.Offset(&e, &e.tail))
	var le localEntry[[11]atomic.Uint64, shortKey]
	require.Equal(t, 24+hdrSize, rawmem.Offset(&le, &le.pend))
	require.Equal(t, uintptr(24+24+8*11), rawmem.Sizeof[localEntry[[11]atomic.Uint64, shortKey]](), "a Local entry has no glob and no tail")
	keys := []string{"", "k", strings.Repeat("x", 23), strings.Repeat("y", 24), strings.Repeat("z", 63), strings.Repeat("w", 64), strings.Repeat("v", 1000)}
	for slots := 2; slots <= 65; slots++ {
		for _, eventual := range []bool{false, true} {
			ring, alloc := entryAllocator(slots, eventual)
			require.NotNil(t, alloc)
			require.GreaterOrEqual(t, ring, slots)
			for _, key := range keys {
				h := alloc(key)
				require.Equal(t, key, keyOf(h))
				if len(key) > 0 && len(key) < 64 {
					end := rawmem.StringAddr(keyOf(h)) + uintptr(len(key))
					require.Equal(t, rawmem.Addr(h)-1, end, "the key's bytes end a byte before the header")
				}
			}
		}
	}
	_, alloc := entryAllocator(66, true)
	require.Nil(t, alloc)
}

// TestEntryKeyLine: at the default precision an Eventual entry of a key of
// at most 23 bytes starts on a cache line, and its key, state, budget and
// room share it (the layout rings.go states).
func TestEntryKeyLine(t *testing.T) {
	t.Parallel()
	_, alloc := entryAllocator(11, true)
	for i := range 64 {
		h := alloc(fmt.Sprintf("key-%d", i))
		start := rawmem.StringAddr(keyOf(h))
		last := rawmem.Addr(h) + hdrSize - 1
		require.Equal(t, start/64, last/64, "key %q", keyOf(h))
	}
}
