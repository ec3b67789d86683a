package window

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRoomSplitsExactly: moving part of Whole to the cost side never changes
// the admit test's answer (a cached budget is the room without the current
// bucket's count, and must admit exactly what the test on the whole estimate
// admits).
func TestRoomSplitsExactly(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < 200_000; i++ {
		limit := 1 + rng.Int64N(1<<32-1)
		whole := rng.Int64N(limit + 1)
		old := rng.Int64N(limit + 1)
		phase := rng.Float64()
		if i%3 == 0 { // phases that make the weighted share nearly an integer
			q := 1 + rng.Int64N(100)
			phase = float64(rng.Int64N(q)) / float64(q)
		}
		w := float64(old) * (1 - phase)
		b := rng.Int64N(whole + 1)
		n := 1 + rng.Int64N(3)
		full := Estimate{Whole: whole, Weighted: w}
		part := Estimate{Whole: whole - b, Weighted: w}
		require.Equal(t, n <= full.Room(limit), b+n <= part.Room(limit),
			"limit %d whole %d (b %d) weighted %v n %d", limit, whole, b, w, n)
	}
}

// TestRoomAbsorbsRounding: a weighted share that is an integer in exact
// arithmetic but rounds above it still leaves the exact room.
func TestRoomAbsorbsRounding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		old   int64
		phase float64
		want  int64 // the exact weighted share
	}{
		{30, 0.7, 9}, {10, 0.9, 1}, {3, 2.0 / 3, 1}, {49, 6.0 / 7, 7}, {1000, 0.3, 700},
	} {
		e := Estimate{Whole: 5, Weighted: float64(tc.old) * (1 - tc.phase)}
		require.Equal(t, 100-5-tc.want, e.Room(100), "%d·(1−%v) = %.17g", tc.old, tc.phase, e.Weighted)
	}
	// And nothing a whole unit beyond: a share just above an integer by more
	// than the tolerance counts as the next one.
	require.Equal(t, int64(100-5-10), Estimate{Whole: 5, Weighted: 9 + 1e-6}.Room(100))
}

// TestLuaRoom: the Lua admit test is generated from the Go constant.
func TestLuaRoom(t *testing.T) {
	t.Parallel()
	require.True(t, strings.HasPrefix(LuaRoom, "local function room(whole, weighted, limit)"))
	require.Contains(t, LuaRoom, "limit - whole + math.floor(1.0000000000000001e-09 - weighted)")
}
