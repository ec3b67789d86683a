package window

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// unitCases are warmCases plus rules whose interval is not a whole number of
// µs (remaining's float path) and the smallest warm-ups.
var unitCases = append([]struct {
	name           string
	window, warmup time.Duration
	limit, burst   int64
}{
	{"3/s warm 1s burst 7: T not whole", time.Second, time.Second, 3, 7},
	{"7/min warm 1min: T not whole", time.Minute, time.Minute, 7, 0},
	{"1/s warm 1µs burst 1: under one permit", time.Second, time.Microsecond, 1, 1},
	{"1000/s warm 1ms burst 1", time.Second, time.Millisecond, 1000, 1},
	{"100/s warm 655.36s: the most permits", time.Second, 655360 * time.Millisecond, 100, 1000},
}, warmCases...)

// TestWarmUnitIsAdmit: every field of Unit is what admit and Check decide on
// the states it stands for, at any time and whatever those states hold
// besides.
func TestWarmUnitIsAdmit(t *testing.T) {
	t.Parallel()
	for i, tc := range unitCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := NewWarmUp(tc.window, tc.warmup, tc.limit, tc.burst)
			u := w.Unit()
			require.Equal(t, w.burst, u.Burst)
			require.Equal(t, w.stable, u.Stable)
			require.Equal(t, w.maxP, u.MaxPermits)
			rng := rand.New(rand.NewPCG(41, uint64(i)))
			for range 2000 {
				now := int64(1_800_000_000)*int64(time.Second) + rng.Int64N(int64(time.Hour))
				us := micros(now)
				// Room: the largest debt admitting one unit, on any stored
				// permits.
				stored := rng.Float64() * w.maxP
				_, ok := w.admit(Warm{Next: us + u.Room, Stored: stored}, now, 1)
				require.True(t, ok, "debt Room")
				_, ok = w.admit(Warm{Next: us + u.Room + 1, Stored: stored}, now, 1)
				require.False(t, ok, "debt Room+1")
				_, _, rem, _, _ := w.Check(Warm{Next: us + u.Room + 1 + rng.Int64N(1000), Stored: stored}, now, 1)
				require.Zero(t, rem, "Remaining above Room")
				// Wait: no stored permits, no idling.
				s := Warm{Next: us + rng.Int64N(u.Room+1)}
				next, ok := w.admit(s, now, 1)
				require.True(t, ok)
				require.Equal(t, Warm{Next: s.Next + u.Wait}, next, "warm unit")
				// Cold: a fresh key, whatever its time.
				next, ok, rem, _, _ = w.Check(w.Fresh(now), now, 1)
				require.True(t, ok)
				require.Equal(t, Warm{Next: us + u.Cold.Next, Stored: u.Cold.Stored}, next, "cold unit")
				require.Equal(t, u.ColdRemaining, rem, "Remaining after the cold unit")
				// Remaining: remaining's, where T is whole.
				debt := rng.Int64N(4*u.Room + 4)
				if r, ok := u.Remaining(debt); ok {
					require.Equal(t, w.remaining(max(debt, 0)), r, "debt %d", debt)
				} else {
					require.Zero(t, w.whole, "Remaining declined a whole T")
				}
			}
		})
	}
}

// TestWarmColdAfter: ColdAfter is the shortest idling after which resync
// fills the stored permits up to MaxPermits, and every longer idling and
// every larger stored count fill them too.
func TestWarmColdAfter(t *testing.T) {
	t.Parallel()
	for i, tc := range unitCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := NewWarmUp(tc.window, tc.warmup, tc.limit, tc.burst)
			rng := rand.New(rand.NewPCG(42, uint64(i)))
			full := func(stored float64, d int64) bool {
				const now = int64(1_800_000_000_000_000) // µs
				return w.resync(Warm{Next: now - d, Stored: stored}, now).Stored == w.maxP
			}
			for _, stored := range []float64{0, 0.5, 1, w.maxP / 2, w.maxP - 1, rng.Float64() * w.maxP} {
				stored = max(stored, 0)
				d := w.ColdAfter(stored)
				require.GreaterOrEqual(t, d, int64(1))
				at := fmt.Sprintf("stored %v, ColdAfter %d", stored, d)
				require.True(t, full(stored, d), at)
				if d > 1 {
					require.False(t, full(stored, d-1), at)
				}
				for range 100 {
					require.True(t, full(stored, d+rng.Int64N(10*d)), at)
					require.True(t, full(stored+rng.Float64()*(w.maxP-stored), d), at)
				}
			}
		})
	}
}

// TestWarmRemainingWhole: remaining's integer path (T a whole number of
// µs) gives what the float estimate settled on fits gives, at every debt
// around the multiples of T and at random ones.
func TestWarmRemainingWhole(t *testing.T) {
	t.Parallel()
	for i, tc := range unitCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := NewWarmUp(tc.window, tc.warmup, tc.limit, tc.burst)
			if w.whole == 0 {
				require.NotEqual(t, w.stable, float64(int64(w.stable)), "only a T that is not whole takes the float path")
				return
			}
			rng := rand.New(rand.NewPCG(43, uint64(i)))
			T := int64(w.whole)
			for k := range w.burst + 3 {
				for _, debt := range []int64{k*T - 1, k * T, k*T + 1, k*T + rng.Int64N(T)} {
					debt = max(debt, 0)
					require.Equal(t, w.remainingFloat(debt), w.remaining(debt), "debt %d", debt)
				}
				if k > 1000 {
					break
				}
			}
			for range 10000 {
				debt := rng.Int64N(4*w.burst*T + 1)
				require.Equal(t, w.remainingFloat(debt), w.remaining(debt), "debt %d", debt)
			}
			require.Equal(t, w.remainingFloat(maxDebt), w.remaining(maxDebt))
		})
	}
}
