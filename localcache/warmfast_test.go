package localcache

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// warmRules are the rules of the fast-path tests: a whole interval, one
// that is not (remaining's float path), a burst of one, the most stored
// permits, and warm-ups of a few intervals. With warm, the hammered key of
// TestWarmTableFastPaths spends its stored permits within the test and
// then takes the warm path; with a burst of one a key is admitted only
// without debt, so after some refill (the warm state needs next exactly
// at now); and the most stored permits take longer to spend.
var warmRules = []struct {
	win, warm    time.Duration
	limit, burst int64
	warmPath     bool
}{
	{time.Second, 5 * time.Second, 10, 0, true},
	{time.Second, 10 * time.Second, 3, 4, true},
	{time.Minute, time.Minute, 1000, 100, true},
	{time.Second, 2 * time.Second, 100, 1, false},
	{time.Second, 655360 * time.Millisecond, 100, 1000, false},
	{time.Hour, 3 * time.Second, 360_000, 50, true},
}

// warmPath names the path a check of one unit takes on word at now, as
// WarmTable.Allow chooses it.
func warmPath(tb *WarmTable, word uint64, now int64) string {
	d, fresh := tb.ahead(word, usOf(now))
	q := word & warmQMask
	switch {
	case fresh || (d < 0 && (-d >= tb.coldAfter[q>>warmBandShift] || q == tb.coldQ && -d >= tb.coldAfterQ)):
		return "cold"
	case d > tb.u.Room:
		return "denied"
	case q == 0 && d >= 0:
		return "warm"
	}
	return "check"
}

// TestWarmTableFastPaths: checks of one unit, on keys whose traffic keeps
// them in each of the fast paths' states (hammered: warm and denied; slow
// and idle: cold) and in between (steady, at about the stable rate; mixed),
// decide exactly what window.WarmUp decides on a state rounded as the
// packing rounds it, every Outcome field; and every path is taken (the
// warm one where the rule lets a key reach it, warmRules).
func TestWarmTableFastPaths(t *testing.T) {
	t.Parallel()
	for i, tc := range warmRules {
		t.Run(fmt.Sprintf("%v/%d/%d/%v", tc.win, tc.limit, tc.burst, tc.warm), func(t *testing.T) {
			t.Parallel()
			w := window.NewWarmUp(tc.win, tc.warm, tc.limit, tc.burst)
			tb, err := NewWarmTable(w, NewKeys(100))
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(33, uint64(i)))
			iv := int64(w.Unit().Stable * 1000)
			gaps := map[string]func() int64{
				"hammered": func() int64 { return rng.Int64N(iv/4 + 1) },
				"steady":   func() int64 { return iv/2 + rng.Int64N(3*iv/2) },
				"slow":     func() int64 { return 3*iv + rng.Int64N(20*iv) },
				"idle":     func() int64 { return rng.Int64N(2 * int64(tc.warm)) },
				"mixed": func() int64 {
					if rng.IntN(30) == 0 {
						return rng.Int64N(2 * int64(tc.warm))
					}
					return rng.Int64N(2 * iv)
				},
			}
			ref := map[string]window.Warm{}
			paths := map[string]int{}
			for key, gap := range gaps {
				now := base + 321
				for step := 0; step < 3000; step++ {
					now += gap()
					s, seen := ref[key]
					if !seen {
						s = w.Fresh(now)
					}
					e := tb.keys.lookup(key)
					paths[warmPath(tb, e.word.Load(), now)]++
					next, ok, _, _, retry := w.Check(s, now, 1)
					want := verdict.Outcome{Remaining: w.Remaining(s, now), ResetAfter: w.ResetAfter(s, now), RetryAfter: retry}
					if ok {
						next = reference.RoundWarm(w.Unit(), next)
						ref[key] = next
						want = verdict.Outcome{Allowed: true, Remaining: w.Remaining(next, now), ResetAfter: w.ResetAfter(next, now)}
					}
					require.Equal(t, want, tb.Allow(key, now, 1), "%s step %d at %d, state %+v", key, step, now, s)
				}
			}
			for _, p := range []string{"cold", "denied", "warm", "check"} {
				if p != "warm" || tc.warmPath {
					require.Positive(t, paths[p], "path %s never taken: %v", p, paths)
				}
			}
		})
	}
}

// TestWarmColdBands: coldAfter's entry for a band of the low bits is an
// idling after which resync fills every permit count of the band (as the
// word holds it) up to MaxPermits, checked for every count; coldAfterQ is
// the shortest such idling for the low bits a cold unit leaves.
func TestWarmColdBands(t *testing.T) {
	t.Parallel()
	for _, tc := range warmRules {
		t.Run(fmt.Sprintf("%v/%d/%d/%v", tc.win, tc.limit, tc.burst, tc.warm), func(t *testing.T) {
			t.Parallel()
			w := window.NewWarmUp(tc.win, tc.warm, tc.limit, tc.burst)
			tb, err := NewWarmTable(w, NewKeys(1))
			require.NoError(t, err)
			now := base + 999
			us := usOf(now)
			want, _, _, _, _ := w.Check(w.Fresh(now), now, 1)
			cold := func(q uint64, d int64) bool {
				// A unit on the state is what it is on a fresh key.
				got, ok, _, _, _ := w.Check(window.Warm{Next: us - d, Stored: float64(q) * tb.unit}, now, 1)
				return ok && got == want
			}
			for q := uint64(0); q <= warmSteps; q++ {
				if d := tb.coldAfter[q>>warmBandShift]; !cold(q, d) {
					t.Fatalf("q %d idle %dµs: not fully cold", q, d)
				}
			}
			// coldAfterQ is the shortest idling for coldQ.
			require.True(t, cold(tb.coldQ, tb.coldAfterQ))
			if tb.coldAfterQ > 1 {
				require.False(t, cold(tb.coldQ, tb.coldAfterQ-1))
			}
		})
	}
}
