package reference

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLogInWindowEdges(t *testing.T) {
	t.Parallel()
	const W = 100
	l := NewLog(W, 10)
	assert.Zero(t, l.InWindow(-1000), "empty")
	l.Add(-50, 3)
	l.Add(-50, 1)                               // same time twice
	require.Equal(t, int64(4), l.InWindow(-50)) // an event counts at its own time
	l.Add(0, 2)
	tests := []struct {
		t    int64
		want int64
	}{
		{0, 6},       //
		{49, 6},      // (−51, 49]: −50 still inside
		{50, 2},      // (−50, 50]: −50 left exactly W later
		{99, 2},      //
		{100, 0},     // (0, 100]: 0 left
		{1 << 40, 0}, // long after
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, l.InWindow(tt.t), "InWindow(%d)", tt.t)
	}
}

func TestLogAllow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		limit int64
		reqs  []event
		want  []bool
	}{
		{"n > limit on empty", 5, []event{{0, 6}}, []bool{false}},
		{"n = limit on empty", 5, []event{{0, 5}, {1, 1}}, []bool{true, false}},
		{"cost counts", 5, []event{{0, 3}, {1, 3}, {2, 2}, {3, 1}}, []bool{true, false, true, false}},
		{"denied does not count", 2, []event{{0, 2}, {1, 1}, {1, 1}, {10, 2}}, []bool{true, false, false, true}},
		{"frees exactly W later", 1, []event{{0, 1}, {9, 1}, {10, 1}}, []bool{true, false, true}},
		{"negative times", 1, []event{{-25, 1}, {-16, 1}, {-15, 1}}, []bool{true, false, true}},
		{"zero cost always fits", 1, []event{{0, 1}, {1, 0}}, []bool{true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := NewLog(10, tt.limit)
			for i, q := range tt.reqs {
				assert.Equal(t, tt.want[i], l.Allow(q.t, q.n), "request %d %+v", i, q)
			}
		})
	}
}

// TestLogInWindowRandom compares InWindow with a brute-force count over
// random non-decreasing times, mixing Add, Allow and queries, with enough
// expired entries (> 1024) that the log compacts many times.
func TestLogInWindowRandom(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		window time.Duration
		limit  int64
		gap    int64 // mean gap between operations
		ops    int
	}{
		{100, 1 << 40, 1, 20000}, // 1ns apart: the log holds ~100 entries
		{time.Microsecond, 50, 20, 20000},
		{time.Second, 1 << 40, 100 * msec, 5000}, // few expire
		{time.Millisecond, 3000, 1000, 30000},    // ~1000 live entries around the compaction size
	} {
		t.Run(fmt.Sprintf("W=%v/L=%d", tc.window, tc.limit), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(11, uint64(tc.window)))
			l := NewLog(tc.window, tc.limit)
			var added []event
			tm := r.Int64N(1<<40) - 1<<39
			compactions := 0
			for i := range tc.ops {
				tm += r.Int64N(2*tc.gap + 1)
				before := len(l.times)
				switch r.IntN(3) {
				case 0:
					n := 1 + r.Int64N(3)
					l.Add(tm, n)
					added = append(added, event{tm, n})
				case 1:
					n := 1 + r.Int64N(3)
					in := bruteWindow(tailFrom(added, tm, int64(tc.window)), tm, int64(tc.window))
					require.Equal(t, in+n <= tc.limit, l.Allow(tm, n), "op %d: Allow(%d, %d) with %d in window", i, tm, n, in)
					if in+n <= tc.limit {
						added = append(added, event{tm, n})
					}
				default:
					require.Equal(t, bruteWindow(tailFrom(added, tm, int64(tc.window)), tm, int64(tc.window)), l.InWindow(tm), "op %d: InWindow(%d)", i, tm)
				}
				if len(l.times) < before {
					compactions++
				}
				// Invariants: entries ascending, head within bounds, sum
				// equal to the live entries, memory bounded.
				require.LessOrEqual(t, l.head, len(l.times))
				require.Len(t, l.costs, len(l.times))
				var sum int64
				for _, c := range l.costs[l.head:] {
					sum += c
				}
				require.Equal(t, sum, l.sum)
				require.LessOrEqual(t, len(l.times), 2*(1025+(len(l.times)-l.head))+1)
			}
			for i := 1; i < len(l.times); i++ {
				require.LessOrEqual(t, l.times[i-1], l.times[i])
			}
			if tc.gap*int64(tc.ops) > 4*int64(tc.window) && tc.ops > 4000 {
				assert.Positive(t, compactions, "expected the log to compact")
			}
		})
	}
}

// tailFrom returns the suffix of the sorted events that can still be inside
// (t−W, t], so brute force stays linear in the window, not the history.
func tailFrom(ev []event, t, W int64) []event {
	i := len(ev)
	for i > 0 && ev[i-1].t > t-W {
		i--
	}
	return ev[i:]
}

// TestLogCompaction drives the log through exactly the compaction threshold:
// 1025 entries expire at once, then the log keeps working with the right
// costs in the right places.
func TestLogCompaction(t *testing.T) {
	t.Parallel()
	const W = 10_000
	l := NewLog(W, 1<<40)
	for i := range int64(3000) {
		l.Add(i, i%7+1) // distinct-ish costs, to catch misaligned times/costs
	}
	require.Len(t, l.times, 3000)
	require.Zero(t, l.head)

	// At t = 1025+W−1, entries 0..1024 (1025 of them) have left: head = 1025
	// > 1024 but 2·1025 ≤ 3000, so no compaction yet.
	got := l.InWindow(1025 + W - 1)
	require.Equal(t, 1025, l.head)
	require.Len(t, l.times, 3000)
	require.Equal(t, sumCost(1025, 2999), got)

	// At t = 1600+W−1, head = 1600 and 2·1600 > 3000: compacts.
	got = l.InWindow(1600 + W - 1)
	require.Zero(t, l.head, "compacted")
	require.Len(t, l.times, 1400)
	require.Equal(t, sumCost(1600, 2999), got)
	for i, tm := range l.times {
		require.Equal(t, int64(1600+i), tm)
		require.Equal(t, (tm%7)+1, l.costs[i], "cost moved with its time")
	}

	// Everything expires at once: compaction to empty.
	for i := int64(3000); i < 5000; i++ {
		l.Add(i, 1)
	}
	require.Zero(t, l.InWindow(1<<40))
	require.Empty(t, l.times)
	require.Zero(t, l.head)

	// And the log works afterwards.
	l.Add(1<<40, 5)
	require.Equal(t, int64(5), l.InWindow(1<<40+W-1))
	require.Zero(t, l.InWindow(1<<40+W))
}

func sumCost(from, to int64) int64 {
	var s int64
	for i := from; i <= to; i++ {
		s += i%7 + 1
	}
	return s
}

// event is one admission: cost n at time t (ns).
type event struct {
	t int64
	n int64
}

// bruteWindow sums the costs of the events in (t−w, t], one by one.
func bruteWindow(ev []event, t, w int64) int64 {
	var sum int64
	for _, e := range ev {
		if e.t > t-w && e.t <= t {
			sum += e.n
		}
	}
	return sum
}

const msec = int64(time.Millisecond)
