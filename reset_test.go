package sluice_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
)

// resetAlgorithms are the algorithms the reset properties run over.
var resetAlgorithms = []policy.Algorithm{
	policy.SlidingWindow, policy.WeightedWindow, policy.FixedWindow,
	policy.TokenBucket, policy.GCRA, policy.SlidingLog,
}

// resetRule is a rule of algorithm a with a limit tier ("gold"), an
// Unlimited tier ("vip") and a Deny tier ("bad").
func resetRule(a policy.Algorithm, m policy.Mode, limit, gold int64) policy.Rule {
	return policy.Rule{
		Name: "api", Limit: limit, Window: 10 * time.Second, Algorithm: a, Mode: m,
		Overrides: []policy.Override{
			{Tier: "gold", Keys: []string{"gold-1"}, Limit: gold},
			{Tier: "vip", Keys: []string{"vip"}, Unlimited: true},
			{Tier: "bad", Keys: []string{"bad"}, Deny: true},
		},
	}
}

// resetObs is the last observation of a key: when the quota is whole again
// (now+ResetAfter) as it said.
type resetObs struct {
	at, whole int64
	allowed   bool
}

// TestResetNeverRecedes: on a virtual clock, for every algorithm, key kind
// (the rule's, a limit tier's, an Unlimited and a Deny tier's) and across a
// reload that changes the limits, with random arrivals, checks and peeks:
//
//   - while nothing is admitted for a key, the time its quota is whole again,
//     now+ResetAfter, never moves later (once it has passed, ResetAfter is
//     0);
//   - on a denial, ResetAfter ≥ RetryAfter;
//   - Limit is the limit in force for the key: its tier's, the rule's after
//     the reload, 0 for the Unlimited and Deny tiers (Unlimited, Blocked).
//
// Local mode only: the store modes decide on the store's clock (the local
// clock plus an offset the syncer measures against the store's TIME), which
// a virtual clock does not drive, so they are not covered here.
func TestResetNeverRecedes(t *testing.T) {
	t.Parallel()
	for ai, a := range resetAlgorithms {
		m := policy.Local
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			c := newFakeClock(1_800_000_000 * int64(time.Second))
			limits := [2][2]int64{{10, 40}, {25, 6}} // rule, gold: before and after the reload
			l := newAlgoLimiter(t, c, resetRule(a, m, limits[0][0], limits[0][1]))
			testResetNeverRecedes(t, c, l, a, m, ai, limits)
		})
	}
}

func testResetNeverRecedes(t *testing.T, c *fakeClock, l *sluice.Limiter, a policy.Algorithm, m policy.Mode, ai int, limits [2][2]int64) {
	{
		{
			rng := rand.New(rand.NewPCG(7, uint64(ai)))
			keys := []string{"k-0", "k-1", "gold-1", "vip", "bad"}
			last := map[string]resetObs{}
			var denials, admissions, zeroes int
			phase := 0
			for step := 0; step < 4000; step++ {
				if step == 2000 {
					require.NoError(t, l.SetRules(resetRule(a, m, limits[1][0], limits[1][1])))
					phase = 1
				}
				// Bursts then quiet: keys fill up, then are probed while
				// nothing is admitted.
				gap := rng.Int64N(int64(200 * time.Millisecond))
				if rng.IntN(30) == 0 {
					gap = rng.Int64N(int64(15 * time.Second))
				}
				c.add(gap)
				now := c.nanos()
				key := keys[rng.IntN(len(keys))]
				var d sluice.Decision
				var err error
				peek := rng.IntN(4) == 0
				if peek {
					d, err = l.Peek("api", key)
				} else {
					d, err = l.Allow(context.Background(), "api", key)
				}
				require.NoError(t, err)
				at := fmt.Sprintf("step %d key %s peek %v: %+v", step, key, peek, d)
				switch key {
				case "vip":
					require.True(t, d.Unlimited(), at)
					require.Zero(t, d.ResetAfter, at)
					continue
				case "bad":
					require.True(t, d.Blocked(), at)
					require.GreaterOrEqual(t, d.ResetAfter, d.RetryAfter, at)
					continue
				case "gold-1":
					require.Equal(t, limits[phase][1], d.Limit, at)
				default:
					require.Equal(t, limits[phase][0], d.Limit, at)
				}
				require.GreaterOrEqual(t, d.ResetAfter, time.Duration(0), at)
				if !d.Allowed && !peek { // a Peek has no RetryAfter
					denials++
					require.GreaterOrEqual(t, d.ResetAfter, d.RetryAfter, at)
					require.Positive(t, d.RetryAfter, at)
				}
				admitted := d.Allowed && !peek
				if admitted {
					admissions++
				}
				whole := now + int64(d.ResetAfter)
				if p, ok := last[key]; ok && !admitted {
					require.LessOrEqual(t, whole, max(p.whole, now), "%s: whole at %d, before at %d (Δ %v)", at, whole, p.whole, time.Duration(whole-p.whole))
					if now >= p.whole {
						zeroes++
						require.Zero(t, d.ResetAfter, "%s: the quota was whole again %v ago", at, time.Duration(now-p.whole))
					}
				}
				last[key] = resetObs{at: now, whole: whole, allowed: d.Allowed}
			}
			require.Positive(t, denials, "the test must reach denials")
			require.Positive(t, admissions)
			require.Positive(t, zeroes, "the test must see quotas whole again")
		}
	}
}

// TestSoftBandOnDecision: a check admitted past Limit, in the soft band, says
// so (InSoftBand), for every algorithm; the checks within Limit and the
// denial after the band do not.
func TestSoftBandOnDecision(t *testing.T) {
	t.Parallel()
	for _, a := range resetAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			c := newFakeClock(1_800_000_000 * int64(time.Second))
			r := policy.Rule{Name: "soft", Limit: 10, Soft: 0.5, Window: time.Hour, Algorithm: a, Mode: policy.Local}
			l := newAlgoLimiter(t, c, r)
			for i := int64(1); i <= 16; i++ {
				d, err := l.Allow(context.Background(), "soft", "k")
				require.NoError(t, err)
				at := fmt.Sprintf("check %d: %+v", i, d)
				switch {
				case i <= 10:
					require.True(t, d.Allowed, at)
					require.False(t, d.InSoftBand(), at)
					require.Equal(t, 10-i, d.Remaining, at)
				case i <= 15:
					require.True(t, d.Allowed, at)
					require.True(t, d.InSoftBand(), at)
					require.Zero(t, d.Remaining, at)
				default:
					require.False(t, d.Allowed, at)
					require.False(t, d.InSoftBand(), at)
				}
				c.add(int64(time.Millisecond))
			}
		})
	}
}

// TestRemainingNeverRises: on one instance, a key's Remaining never rises
// while nothing leaves its window: within a sub-window for the sliding and
// fixed windows (and for the weighted window while its oldest sub-window,
// the one that decays, holds nothing of the key); while no admitted unit
// leaves for a SlidingLog; at one instant for the buckets, which refill
// continuously. Random costs, checks and peeks on a virtual clock.
func TestRemainingNeverRises(t *testing.T) {
	t.Parallel()
	for ai, a := range resetAlgorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			c := newFakeClock(1_800_000_000 * int64(time.Second))
			r := policy.Rule{Name: "api", Limit: 20, Window: 10 * time.Second, Algorithm: a, Mode: policy.Local}
			l := newAlgoLimiter(t, c, r)
			sub := int64(rulegeo.SubWindow(r))
			rng := rand.New(rand.NewPCG(11, uint64(ai)))
			var admitted []int64 // admission times
			prevAt, prevRem := int64(-1), int64(0)
			compared := 0
			for step := 0; step < 5000; step++ {
				switch rng.IntN(10) {
				case 0:
					c.add(rng.Int64N(int64(3 * time.Second)))
				case 1, 2, 3:
				default:
					c.add(rng.Int64N(int64(20 * time.Millisecond)))
				}
				now := c.nanos()
				var d sluice.Decision
				var err error
				if rng.IntN(5) == 0 {
					d, err = l.Peek("api", "k")
				} else {
					d, err = l.AllowN(context.Background(), "api", "k", 1+rng.Int64N(3))
					if d.Allowed {
						admitted = append(admitted, now)
					}
				}
				require.NoError(t, err)
				quiet := prevAt >= 0
				switch a {
				case policy.SlidingWindow, policy.FixedWindow:
					quiet = quiet && now/sub == prevAt/sub
				case policy.WeightedWindow:
					oldest := now/sub - int64(rulegeo.Buckets(r))
					for _, at := range admitted {
						quiet = quiet && at/sub != oldest
					}
					quiet = quiet && now/sub == prevAt/sub
				case policy.SlidingLog:
					for _, at := range admitted {
						left := at + int64(r.Window)
						quiet = quiet && !(left > prevAt && left <= now)
					}
				default:
					quiet = quiet && now == prevAt
				}
				if quiet {
					compared++
					require.LessOrEqual(t, d.Remaining, prevRem, "step %d: %+v after %d", step, d, prevRem)
				}
				prevAt, prevRem = now, d.Remaining
				if len(admitted) > 200 {
					admitted = admitted[100:]
				}
			}
			require.Greater(t, compared, 500)
		})
	}
}
