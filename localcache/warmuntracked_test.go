package localcache

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// warmChecks are warm-ups with a whole and a fractional T, and Burst 1.
var warmChecks = []window.WarmUp{
	window.NewWarmUp(time.Second, 5*time.Second, 10, 0),
	window.NewWarmUp(time.Second, 2*time.Second, 3, 7),
	window.NewWarmUp(time.Minute, time.Minute, 7, 1),
}

// TestWarmFitsIsCheck: warmFits, the untracked path's admission test,
// decides every debt and cost as window.WarmUp.Check does, at and around
// each cost's room.
func TestWarmFitsIsCheck(t *testing.T) {
	t.Parallel()
	for _, w := range warmChecks {
		u := w.Unit()
		t.Run(fmt.Sprintf("T=%v/burst=%d", u.Stable, u.Burst), func(t *testing.T) {
			t.Parallel()
			now := base + 789
			us := usOf(now)
			for n := int64(-1); n <= u.Burst+1; n++ {
				room := int64(float64(u.Burst-n) * u.Stable)
				for _, debt := range []int64{0, 1, room - 1, room, room + 1, u.Room, u.Room + 1, 1 << 40} {
					debt = max(debt, 0)
					for _, stored := range []float64{0, u.MaxPermits / 2, u.MaxPermits} {
						_, ok, _, _, _ := w.Check(window.Warm{Next: us + debt, Stored: stored}, now, n)
						if got := warmFits(&u, warmDebt(us+debt, us), n); got != ok {
							require.Equal(t, ok, got, "n=%d debt=%d stored=%v", n, debt, stored)
						}
					}
				}
			}
		})
	}
}

// TestWarmUntrackedDecidesAsCheck: a WarmTable decides a key it does not
// track as window.WarmUp.Check decides the sketch's state of that key
// (its estimate, fully cold), and a denial reports Check's outcome.
func TestWarmUntrackedDecidesAsCheck(t *testing.T) {
	t.Parallel()
	for i, w := range warmChecks {
		u := w.Unit()
		t.Run(fmt.Sprintf("T=%v/burst=%d", u.Stable, u.Burst), func(t *testing.T) {
			t.Parallel()
			tb, err := NewWarmTable(w, NewKeys(1))
			require.NoError(t, err)
			fill(t, tb)
			names := sketchKeys(4)
			rng := rand.New(rand.NewPCG(7, uint64(i)))
			iv := int64(u.Stable * 1000)
			now := base + 321
			var admitted, denied int
			for step := range 5000 {
				now += gap(rng, iv/2)
				key := names[rng.IntN(len(names))]
				n := rng.Int64N(u.Burst + 2)
				st := window.Warm{Next: tb.sketch().estimate(key), Stored: u.MaxPermits}
				_, ok, rem, reset, retry := w.Check(st, now, n)
				o := tb.Allow(key, now, n)
				if o.Allowed != ok {
					require.Equal(t, ok, o.Allowed, "step %d: %s cost %d", step, key, n)
				}
				if ok {
					admitted++
					continue
				}
				denied++
				if want := (verdict.Outcome{Remaining: rem, ResetAfter: reset, RetryAfter: retry}); o != want {
					require.Equal(t, want, o, "step %d: %s cost %d", step, key, n)
				}
			}
			require.Positive(t, admitted)
			require.Positive(t, denied)
		})
	}
}
