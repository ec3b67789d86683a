package localcache

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/stretchr/testify/require"
)

// keysOf returns tb's key bound, and whether tb tracks key.
func keysOf(tb tableport.KeyTable, key string) (*Keys, bool) {
	switch tb := tb.(type) {
	case *GCRATable:
		_, ok := tb.keys.m.Load(key)
		return tb.keys.keys, ok
	case *WarmTable:
		_, ok := tb.keys.m.Load(key)
		return tb.keys.keys, ok
	case *LogTable:
		_, ok := tb.keys.m.Load(key)
		return tb.keys.keys, ok
	}
	panic(fmt.Sprintf("%T", tb))
}

// keyTracked reports whether tb tracks key.
func keyTracked(tb tableport.KeyTable, key string) bool {
	_, ok := keysOf(tb, key)
	return ok
}

// TestKeyTablesKeyBound: the KeyTables take keys in by the admission rule
// of a Table: below half of the bound at the first check, past it once the
// key has been seen often enough, at the bound not at all (and a refused
// key asks for a sweep). A key without an entry is decided on its own, with
// its own capacity, never on an entry shared with other keys; a key that
// gets in carries what it used on the sketch. Sweeps free the bound.
func TestKeyTablesKeyBound(t *testing.T) {
	t.Parallel()
	// What a fresh key admits at once: the bucket's Burst, the log's
	// Limit; a warm-up key (T = 100ms, cold: 3T a unit, Burst 2) one.
	capacity := map[string]int64{"gcra": 2, "warm": 1, "log": 10}
	for name, tb := range keyTables(t, time.Second, 10, 2, time.Second, 4) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			now := base
			keys, _ := keysOf(tb, "")
			for _, k := range []string{"a", "b"} {
				require.True(t, tb.Allow(k, now, 1).Allowed)
				require.True(t, keyTracked(tb, k), "%s: below half of the bound, in at once", k)
			}
			// Half full: a key needs two sightings. Its first check is
			// decided on the sketch; its second gets it in, with what the
			// sketch admitted: its own capacity, whole.
			require.True(t, tb.Allow("c", now, 1).Allowed)
			require.False(t, keyTracked(tb, "c"), "seen once")
			require.Equal(t, capacity[name]-1, countAdmitted(tb, "c", now), "its own capacity, carried into its entry")
			require.True(t, keyTracked(tb, "c"), "seen twice")
			// 3/4 full: eight sightings. Whether its checks are decided on
			// the sketch or in its entry, "d" gets its capacity once.
			var got int64
			for i := 0; !keyTracked(tb, "d"); i++ {
				require.Less(t, i, 8, "d: in at its eighth sighting")
				if tb.Allow("d", now, 1).Allowed {
					got++
				}
			}
			require.Equal(t, capacity[name], got+countAdmitted(tb, "d", now))
			require.Equal(t, int64(4), keys.tracked())
			require.False(t, keys.Usage().Full())
			// At the bound: no key gets in, and each is decided on its
			// own capacity.
			untracked := keys.Usage().Untracked()
			for _, k := range []string{"e", "f", "g"} {
				require.Equal(t, capacity[name], countAdmitted(tb, k, now), "%s: its own capacity, not a shared one", k)
				require.False(t, keyTracked(tb, k))
				o := tb.Allow(k, now, 1)
				require.False(t, o.Allowed)
				require.Positive(t, o.RetryAfter)
				require.Zero(t, tb.Peek(k, now).Remaining)
				require.Equal(t, map[string]int64{"gcra": 2, "warm": 2, "log": 10}[name], tb.Peek("h", now).Remaining, "a key never checked has its whole capacity")
			}
			require.Greater(t, keys.Usage().Untracked(), untracked)
			require.True(t, keys.Usage().Full(), "a refused key asks for a sweep")
			require.Equal(t, 4, sizeOf(tb))
			// Much later everything is idle: a sweep frees the bound, and
			// keys get in at once again.
			later := now + int64(time.Hour)
			require.Equal(t, 4, tb.Sweep(later))
			require.True(t, tb.Allow("e", later, 1).Allowed)
			require.True(t, keyTracked(tb, "e"))
			require.Equal(t, 1, sizeOf(tb))
		})
	}
}
