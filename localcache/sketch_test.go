package localcache

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFreqSketchNeverUndercounts: without a halving, every key's estimate is
// at least its sightings (capped at 15), whatever the collisions; a sketch
// crowded far past its width over-counts, one with room counts exactly.
func TestFreqSketchNeverUndercounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		width, keys  int
		wantSomeOver bool // crowded: some estimate above the truth
	}{
		{"roomy", 1 << 14, 200, false},
		{"crowded", 16, 2000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFreqSketch(tc.width, 1<<62) // no halving
			seed := maphash.MakeSeed()
			rng := rand.New(rand.NewPCG(1, uint64(tc.keys)))
			truth := make(map[uint64]int, tc.keys)
			for i := range tc.keys {
				h := maphash.String(seed, fmt.Sprint("k", i))
				for range 1 + rng.IntN(20) {
					got := s.add(h)
					truth[h]++
					require.GreaterOrEqual(t, got, min(truth[h], counterMax), "add's estimate")
				}
			}
			over := 0
			for h, n := range truth {
				est := s.estimate(h)
				require.GreaterOrEqual(t, est, min(n, counterMax))
				require.LessOrEqual(t, est, counterMax)
				if est > min(n, counterMax) {
					over++
				}
			}
			assert.Equal(t, tc.wantSomeOver, over > 0, "%d of %d over-counted", over, len(truth))
			unseen := maphash.String(seed, "never")
			if !tc.wantSomeOver {
				assert.Zero(t, s.estimate(unseen))
			}
		})
	}
}

// TestFreqSketchHalving: every period sightings each counter halves,
// rounding down: a key seen once is forgotten, a key seen ten times is
// estimated at five; counters saturate at 15.
func TestFreqSketchHalving(t *testing.T) {
	t.Parallel()
	seed := maphash.MakeSeed()
	hot, once := maphash.String(seed, "hot"), maphash.String(seed, "once")
	s := newFreqSketch(1<<12, 11) // the 11th sighting halves
	for i := range 10 {
		require.Equal(t, i+1, s.add(hot))
	}
	require.Equal(t, 1, s.add(once), "the 11th sighting returns its estimate, then halves")
	assert.Equal(t, 5, s.estimate(hot))
	assert.Zero(t, s.estimate(once), "1/2 rounds to 0")

	sat := newFreqSketch(1<<12, 1<<62)
	for range 40 {
		sat.add(hot)
	}
	assert.Equal(t, counterMax, sat.estimate(hot), "saturates")
	sat.halve()
	assert.Equal(t, 7, sat.estimate(hot), "15/2; no bit leaks into the next counter")
	for r := range freqDepth {
		w, sh := sat.counter(hot, r)
		v := w.Load()
		assert.Equal(t, uint64(7)<<sh, v, "row %d: only the key's counter is set", r)
	}
	assert.Equal(t, 2*(1<<12), s.bytes(), "2 bytes per counter column (4 rows of 4 bits)")
}

// TestFreqSketchConcurrent: sightings from many goroutines, some halvings
// among them, never make an estimate exceed 15, and without halvings every
// sighting counts. Run with -race.
func TestFreqSketchConcurrent(t *testing.T) {
	t.Parallel()
	for _, halving := range []bool{false, true} {
		t.Run(fmt.Sprintf("halving=%v", halving), func(t *testing.T) {
			t.Parallel()
			period := int64(1 << 62)
			if halving {
				period = 97
			}
			s := newFreqSketch(1<<10, period)
			seed := maphash.MakeSeed()
			const keys, rounds = 64, 3
			hs := make([]uint64, keys)
			for i := range hs {
				hs[i] = maphash.String(seed, fmt.Sprint(i))
			}
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range rounds {
						for i := range hs {
							est := s.add(hs[(i+g+r)%keys])
							assert.LessOrEqual(t, est, counterMax)
							assert.GreaterOrEqual(t, est, 1)
						}
					}
				}()
			}
			wg.Wait()
			for _, h := range hs {
				if halving {
					assert.LessOrEqual(t, s.estimate(h), counterMax)
				} else {
					assert.GreaterOrEqual(t, s.estimate(h), min(8*rounds, counterMax), "every sighting counted")
				}
			}
		})
	}
}
