package engine

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCountsSnapshot: every check is counted once in the total; the store
// and failure-mode paths count themselves too, and the local path is what
// is left, by outcome.
func TestCountsSnapshot(t *testing.T) {
	t.Parallel()
	type check struct {
		path Path
		o    Outcome
		n    int
	}
	for _, c := range []struct {
		name   string
		checks []check
	}{
		{"none", nil},
		{"local only", []check{{PathLocal, OutcomeAllowed, 7}, {PathLocal, OutcomeDenied, 3}}},
		{"every path", []check{
			{PathLocal, OutcomeAllowed, 5}, {PathUrgent, OutcomeAllowed, 2}, {PathUrgent, OutcomeDenied, 4},
			{PathStrict, OutcomeAllowed, 1}, {PathFallback, OutcomeError, 3}, {PathShadow, OutcomeAllowed, 2},
			{PathSoft, OutcomeAllowed, 1}, {PathLocal, OutcomeError, 1},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var cs Counts
			var want [NumPaths][NumOutcomes]uint64
			for _, ch := range c.checks {
				for range ch.n {
					cs.Add(ch.path, ch.o) // a path counts before the total
					cs.Check(ch.o)
				}
				want[ch.path][ch.o] += uint64(ch.n)
			}
			assert.Equal(t, want, cs.Snapshot())
		})
	}
}

// TestCountsConcurrent: checks counted from many goroutines add up exactly
// (the stripes lose nothing).
func TestCountsConcurrent(t *testing.T) {
	t.Parallel()
	var cs Counts
	const goroutines, each = 16, 1000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				o := Outcome((g + i) % int(NumOutcomes))
				if i%10 == 0 {
					cs.Add(PathUrgent, o)
				}
				cs.Check(o)
			}
		}()
	}
	wg.Wait()
	s := cs.Snapshot()
	var total, urgent uint64
	for p := range NumPaths {
		for o := range NumOutcomes {
			total += s[p][o]
			if p == PathUrgent {
				urgent += s[p][o]
			}
		}
	}
	assert.Equal(t, uint64(goroutines*each), total)
	assert.Equal(t, uint64(goroutines*each/10), urgent)
}

// TestCountsInFlight: a check counted on its path but not yet in the total
// makes the local count fall short, never exceed, and the local count
// never goes back.
func TestCountsInFlight(t *testing.T) {
	t.Parallel()
	var cs Counts
	for range 5 {
		cs.Check(OutcomeAllowed) // local
	}
	require.Equal(t, uint64(5), cs.Snapshot()[PathLocal][OutcomeAllowed])
	cs.Add(PathUrgent, OutcomeAllowed) // in flight: not in the total yet
	assert.Equal(t, uint64(5), cs.Snapshot()[PathLocal][OutcomeAllowed], "never goes back")
	cs.Check(OutcomeAllowed)
	s := cs.Snapshot()
	assert.Equal(t, uint64(5), s[PathLocal][OutcomeAllowed])
	assert.Equal(t, uint64(1), s[PathUrgent][OutcomeAllowed])
}

// TestCountsNil: a nil *Counts counts nothing and does not panic.
func TestCountsNil(t *testing.T) {
	t.Parallel()
	var cs *Counts
	cs.Check(OutcomeAllowed)
	cs.Add(PathUrgent, OutcomeDenied)
	assert.Equal(t, [NumPaths][NumOutcomes]uint64{}, cs.Snapshot())
}

// TestCountsPaused: a paused Counts counts nothing, on no path; once
// resumed it counts again from where it stood.
func TestCountsPaused(t *testing.T) {
	t.Parallel()
	var cs Counts
	cs.Check(OutcomeAllowed)
	cs.Pause()
	cs.Check(OutcomeAllowed)
	cs.Add(PathUrgent, OutcomeDenied)
	cs.Check(OutcomeDenied)
	s := cs.Snapshot()
	assert.Equal(t, uint64(1), s[PathLocal][OutcomeAllowed])
	assert.Zero(t, s[PathUrgent][OutcomeDenied])
	assert.Zero(t, s[PathLocal][OutcomeDenied])
	cs.Resume()
	cs.Add(PathUrgent, OutcomeDenied)
	cs.Check(OutcomeDenied)
	s = cs.Snapshot()
	assert.Equal(t, uint64(1), s[PathLocal][OutcomeAllowed])
	assert.Equal(t, uint64(1), s[PathUrgent][OutcomeDenied])
	assert.Zero(t, s[PathLocal][OutcomeDenied])
}

// TestNames: the paths and outcomes are named as the metrics' attributes.
func TestNames(t *testing.T) {
	t.Parallel()
	var paths []string
	for p := range NumPaths + 1 {
		paths = append(paths, p.String())
	}
	assert.Equal(t, []string{"local", "urgent", "strict", "fallback", "shadow", "soft", "unknown"}, paths)
	assert.Equal(t, "allowed", OutcomeOf(true, nil).String())
	assert.Equal(t, "denied", OutcomeOf(false, nil).String())
	assert.Equal(t, "error", OutcomeOf(false, errors.New("x")).String())
	assert.Equal(t, "unknown", NumOutcomes.String())
}
