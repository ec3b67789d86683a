package localcache

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// TestKeyTablesCarry: keys move between the sketch and the table (the
// bound fills and frees under them, sweeps evict idle keys) while random
// arrivals check a few of them, colliding in a small sketch: every key's
// admissions, sketch and table together, are what its own exact state
// admits — window.GCRA's, reference.Log's — and for a warm-up key they stay
// within Burst + r·τ at the stable rate over every interval.
func TestKeyTablesCarry(t *testing.T) {
	t.Parallel()
	const win, limit, burst = time.Second, 10, 4
	for name, tb := range keyTables(t, win, limit, burst, 3*time.Second, 1024) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			keys, _ := keysOf(tb, "")
			switch tb := tb.(type) {
			case *GCRATable:
				tb.strangers.Store(newTATSketch(16))
			case *WarmTable:
				tb.strangers.Store(newTATSketch(16))
			case *LogTable:
				tb.strangers.Store(newWinSketch(tb.geo, 16, tb.geo.Span()))
			}
			g := window.NewGCRA(win, limit, burst)
			type event struct{ t, n int64 }
			const nkeys = 40
			admitted := make([][]event, nkeys)
			rng := rand.New(rand.NewPCG(44, 1))
			now := base + 777
			full, moves, carried := false, 0, 0
			for step := range 30000 {
				now += gap(rng, g.Interval()/8)
				if rng.IntN(500) == 0 { // the bound fills, or frees
					if full = !full; full {
						keys.n.Add(1 << 20)
					} else {
						keys.n.Add(-1 << 20)
					}
					moves++
				}
				if rng.IntN(300) == 0 {
					tb.Sweep(now)
				}
				k := rng.IntN(nkeys)
				key := fmt.Sprint("key-", k)
				was := keyTracked(tb, key)
				n := 1 + rng.Int64N(2)
				if tb.Allow(key, now, n).Allowed {
					admitted[k] = append(admitted[k], event{now, n})
					if !was && keyTracked(tb, key) {
						carried++
					}
				}
				_ = step
			}
			t.Logf("%d moves of the bound, %d admissions that brought their key in", moves, carried)
			require.Positive(t, carried)
			for k, evs := range admitted {
				switch name {
				case "gcra":
					tat := int64(tatFresh)
					for i, e := range evs {
						next, ok := g.Admit(tat, e.t, e.n)
						require.True(t, ok, "key-%d admission %d: past its own bucket", k, i)
						tat = next
					}
				case "log":
					ref := reference.NewLog(win, limit)
					for i, e := range evs {
						require.True(t, ref.Allow(e.t, e.n), "key-%d admission %d: past its own log", k, i)
					}
				case "warm":
					// Burst + (Δ + 3µs·m)/T over any m admissions spanning Δ
					// (WarmUp truncates each cost to whole µs, by up to 3µs).
					for i := range evs {
						var sum int64
						for j := i; j < len(evs); j++ {
							sum += evs[j].n
							span := float64(evs[j].t-evs[i].t+int64(3*time.Microsecond)*int64(j-i+1)) / float64(g.Interval())
							if float64(sum) > float64(burst)+span { // require only on failure: it is O(n²) pairs
								require.LessOrEqual(t, float64(sum), float64(burst)+span, "key-%d admissions %d..%d", k, i, j)
							}
						}
					}
				}
			}
		})
	}
}

// TestKeyTablesEntryRace: goroutines released at once on one key, at one
// instant, while the bound frees under them so that the key gets its entry
// in the middle of their checks, round after round: the key is never
// admitted more than its capacity, whichever of its checks were decided on
// the sketch and whichever in its entry. Run with -race.
func TestKeyTablesEntryRace(t *testing.T) {
	t.Parallel()
	capacity := map[string]int64{"gcra": 3, "warm": 3, "log": 3}
	for name, tb := range keyTables(t, time.Second, 3, 3, time.Second, 1<<20) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			keys, _ := keysOf(tb, "")
			var over, entered int
			for r := range 500 {
				keys.n.Add(1 << 21) // full
				key := fmt.Sprint("hot-", r)
				now := base + int64(r)*int64(time.Hour)
				var start, wg sync.WaitGroup
				start.Add(1)
				var admitted atomic.Int64
				for gi := range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						start.Wait()
						for i := range 6 {
							if gi == 0 && i == 1 {
								keys.n.Add(-1 << 21) // the key gets in
							}
							if tb.Allow(key, now, 1).Allowed {
								admitted.Add(1)
							}
							tb.Allow(fmt.Sprint("other-", r, "-", gi, "-", i), now, 1)
						}
					}()
				}
				start.Done()
				wg.Wait()
				if admitted.Load() > capacity[name] {
					over++
				}
				if keyTracked(tb, key) {
					entered++
				}
			}
			require.Zero(t, over, "rounds that admitted past the capacity")
			require.Positive(t, entered)
		})
	}
}

// untrackedCheck is a KeyTable's decision on its sketch, as a check that
// looked its key up while the key had no entry would make it.
func untrackedCheck(tb tableport.KeyTable, key string, now, n int64) verdict.Outcome {
	switch tb := tb.(type) {
	case *GCRATable:
		return tb.untracked(key, now, n)
	case *WarmTable:
		return tb.untracked(key, now, n)
	case *LogTable:
		return tb.untracked(key, now, n)
	}
	panic(fmt.Sprintf("%T", tb))
}

// insertUnseeded puts a new entry for key in tb's map, as a check that
// has just created it and not decided yet would leave it.
func insertUnseeded(tb tableport.KeyTable, key string) {
	switch tb := tb.(type) {
	case *GCRATable:
		tb.keys.insert(key)
	case *WarmTable:
		tb.keys.insert(key)
	case *LogTable:
		tb.keys.insert(key)
	}
}

// TestKeyTablesEntryRaceSteps replays, step by step, the interleavings
// TestKeyTablesEntryRace can only hit by chance: a check that found no
// entry is decided on the sketch after the key got one. Its admission ends
// up in the entry either way, so the key's capacity holds.
func TestKeyTablesEntryRaceSteps(t *testing.T) {
	t.Parallel()
	// At once: the bucket's Burst (3), the log's Limit (3), a cold
	// warm-up key one (each unit costs 3T, Burst 3).
	capacity := map[string]int64{"gcra": 3, "warm": 1, "log": 3}
	for name, tb := range keyTables(t, time.Second, 3, 3, time.Second, 1<<10) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			now := base
			// The entry is seeded and used up before the late check
			// commits on the sketch: the entry decides it, and denies it.
			require.Equal(t, capacity[name], countAdmitted(tb, "seeded", now))
			o := untrackedCheck(tb, "seeded", now, 1)
			require.False(t, o.Allowed, "the entry has no room for the late check")
			require.Positive(t, o.RetryAfter)

			// The entry is in the map, not seeded yet, when the late check
			// commits on the sketch: the check seeds it, with itself in.
			insertUnseeded(tb, "unseeded")
			require.True(t, untrackedCheck(tb, "unseeded", now, 1).Allowed)
			require.Equal(t, capacity[name]-1, countAdmitted(tb, "unseeded", now), "the late check is in the entry's seed")
		})
	}
}
