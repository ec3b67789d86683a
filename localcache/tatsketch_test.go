package localcache

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/window"
)

// sketchAdmit decides cost n at now for key on s with g, as
// GCRATable.untracked does, and reports whether it was admitted.
func sketchAdmit(s *tatSketch, g window.GCRA, key string, now, n int64) bool {
	c := s.cellsOf(key)
	for {
		next, ok := g.Admit(c.estimate(), now, n)
		if !ok {
			return false
		}
		if s.commit(&c, next) {
			return true
		}
		s.read(&c)
	}
}

// TestTATSketchConcurrent: goroutines racing on one key, and on keys that
// share its cells (a sketch of 16 cells per row), never get it past what
// window.GCRA admits on its own admissions — its burst at one instant, one
// more per interval after — and its estimate ends at least its TAT. Run with
// -race.
func TestTATSketchConcurrent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		steps int // rounds after which the clock advances by one interval
	}{{"one instant", 0}, {"over ten intervals", 10}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := window.NewGCRA(time.Second, 10, 20)
			s := newTATSketch(16)
			const rounds = 12
			var hot [rounds]atomic.Int64
			var at [rounds]int64
			now := base
			for r := range rounds {
				at[r] = now
				hammer(func(gi int) {
					for i := range 40 {
						if sketchAdmit(s, g, "hot", now, 1) {
							hot[r].Add(1)
						}
						sketchAdmit(s, g, fmt.Sprint("g", gi, "-", r, "-", i), now, 1)
					}
				})
				if r < tc.steps {
					now += g.Interval()
				}
			}
			tat, total := int64(tatFresh), int64(0)
			for r := range rounds {
				for range hot[r].Load() {
					next, ok := g.Admit(tat, at[r], 1)
					require.True(t, ok, "round %d: admitted past the key's own bucket", r)
					tat = next
					total++
				}
			}
			require.Positive(t, total)
			require.GreaterOrEqual(t, s.estimate("hot"), tat, "the estimate bounds the key's TAT")
			t.Logf("admitted %d (burst %d, %d intervals)", total, g.Burst(), tc.steps)
		})
	}
}

// TestTATSketchCells: cells start at tatFresh (a full bucket for any time),
// a commit raises the other rows to the new TAT and swaps it into the row
// that gave the estimate, and fails if that row changed since the read; a
// key's rows are distinct cells.
func TestTATSketchCells(t *testing.T) {
	t.Parallel()
	s := newTATSketch(minTATWidth)
	assert.Equal(t, 4*minTATWidth*8, s.bytes())
	assert.Equal(t, int64(tatFresh), s.estimate("k"))
	c := s.cellsOf("k")
	seen := map[int]bool{}
	for _, i := range c.at {
		assert.False(t, seen[i], "one cell per row")
		seen[i] = true
	}
	stale := c
	require.True(t, s.commit(&c, base+5))
	for _, i := range c.at {
		assert.Equal(t, base+5, s.cells[i].Load())
	}
	assert.False(t, s.commit(&stale, base+3), "the row that gave the estimate changed")
	assert.Equal(t, base+5, s.estimate("k"), "a failed commit lowers nothing")
	s.read(&c)
	require.True(t, s.commit(&c, base+9))
	assert.Equal(t, base+9, s.estimate("k"))
	// The conservative update: a cell above the new TAT keeps its value.
	o := s.cellsOf("other")
	s.cells[o.at[1]].Store(base + 100)
	s.read(&o)
	require.True(t, s.commit(&o, base+50))
	assert.Equal(t, base+100, s.cells[o.at[1]].Load())
	assert.Equal(t, base+50, s.estimate("other"))

	for _, tc := range []struct{ bound, width int64 }{{1, 1024}, {1000, 1024}, {5000, 8192}, {1_000_000, 1 << 15}} {
		assert.Equal(t, int(tc.width), tatWidth(tc.bound), "bound %d", tc.bound)
	}
}

// TestTATSketchRacingAdmissions: goroutines released at once on a key of
// burst 1, round after round on new keys: exactly one of them is admitted
// per key (the row that gave the estimate serializes them). Run with -race.
func TestTATSketchRacingAdmissions(t *testing.T) {
	t.Parallel()
	g := window.NewGCRA(time.Second, 1, 1)
	s := newTATSketch(16) // crowded: keys share cells, so some are denied
	var twice atomic.Int64
	for r := range 5000 {
		key := fmt.Sprint("k", r)
		var start sync.WaitGroup
		start.Add(1)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.Wait()
				if sketchAdmit(s, g, key, base+int64(r)*int64(time.Second), 1) {
					admitted.Add(1)
				}
			}()
		}
		start.Done()
		wg.Wait()
		if admitted.Load() > 1 {
			twice.Add(1)
		}
	}
	require.Zero(t, twice.Load(), "keys admitted twice on one reading")
}
