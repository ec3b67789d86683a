package localcache

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// fill takes the whole of tb's key bound, so that every key checked after
// stays untracked.
func fill(t *testing.T, tb tableport.KeyTable) {
	t.Helper()
	keys, _ := keysOf(tb, "")
	for i := 0; keys.tracked() < keys.maxKeys(); i++ {
		require.Less(t, i, 100, "the bound does not fill")
		tb.Allow(fmt.Sprint("junk-", i), base, 1)
	}
}

// sketchCase is a property test's sketch: roomy (each key alone in some
// row: decided exactly on its own state), or crowded (keys share every
// cell, and arrivals come faster than a cell's rate: some keys are denied
// under their own limit).
type sketchCase struct {
	name    string
	width   int
	keys    int
	crowded bool
	perIv   int64 // arrivals per emission interval, all keys together
}

var sketchCases = []sketchCase{
	{"roomy", 1024, 20, false, 4},
	{"crowded", 16, 2000, true, 50},
}

// sketchKeys returns the names of n keys: key-0, key-1 ...
func sketchKeys(n int) []string {
	names := make([]string, n)
	for k := range names {
		names[k] = fmt.Sprint("key-", k)
	}
	return names
}

// TestGCRASketchNeverOverAdmits: on random arrivals and costs over many
// keys, every admission a GCRATable makes for a key it does not track is
// one window.GCRA, run on that key's own admissions, makes too, and the
// sketch's estimate stays at least each key's TAT. Roomy, every Outcome is
// exactly window.GCRA's; crowded, some keys are denied under their limit.
func TestGCRASketchNeverOverAdmits(t *testing.T) {
	t.Parallel()
	for i, g := range []window.GCRA{window.NewGCRA(time.Second, 10, 0), window.NewGCRA(time.Minute, 100, 5), window.NewGCRA(time.Second, 3, 1)} {
		for _, sc := range sketchCases {
			t.Run(fmt.Sprintf("%s/T=%v/burst=%d", sc.name, time.Duration(g.Interval()), g.Burst()), func(t *testing.T) {
				t.Parallel()
				tb, err := NewGCRATable(g, NewKeys(1))
				require.NoError(t, err)
				fill(t, tb)
				tb.strangers.Store(newTATSketch(sc.width))
				ref := make([]int64, sc.keys)
				for k := range ref {
					ref[k] = tatFresh
				}
				names := sketchKeys(sc.keys)
				rng := rand.New(rand.NewPCG(41, uint64(i)))
				now := base
				var admitted, falseDenials int
				for step := range 20000 {
					now += gap(rng, g.Interval()/sc.perIv)
					k := rng.IntN(sc.keys)
					key := names[k]
					n := 1 + rng.Int64N(min(g.Burst(), 3))
					tat := ref[k]
					next, ok := g.Admit(tat, now, n)
					want := verdict.Outcome{Remaining: g.Remaining(tat, now), ResetAfter: g.ResetAfter(tat, now), RetryAfter: g.RetryAfter(tat, now, n)}
					if ok {
						want = verdict.Outcome{Allowed: true, Remaining: g.Remaining(next, now), ResetAfter: g.ResetAfter(next, now)}
					}
					o := tb.Allow(key, now, n)
					switch {
					case o.Allowed:
						require.True(t, ok, "step %d: %s admitted past its own bucket", step, key)
						ref[k] = next
						admitted++
					case ok:
						falseDenials++
						require.Positive(t, o.RetryAfter)
					}
					if !sc.crowded {
						require.Equal(t, want, o, "step %d", step)
					}
					if step%101 == 0 {
						for j := range ref {
							// testify only on a failure: its reflection
							// was most of the test's time.
							if e := tb.estimate(names[j]); e < ref[j] {
								require.GreaterOrEqual(t, e, ref[j], "step %d: the sketch bounds key-%d", step, j)
							}
						}
					}
				}
				require.Zero(t, tb.size()-1, "no key got in")
				require.Positive(t, admitted)
				if sc.crowded {
					assert.Positive(t, falseDenials, "a crowded sketch denies some keys under their limit")
				}
				t.Logf("%d admitted, %d denied under the key's own limit", admitted, falseDenials)
			})
		}
	}
}

// TestWarmSketchNeverOverAdmits: every admission a WarmTable makes for a
// key it does not track is one window.WarmUp, run on that key's own
// admissions from a fresh state, makes too; the sketch's estimate stays at
// least each key's next. A key alone in the sketch is admitted at its cold
// rate, one unit per 3T, and never denied at it.
func TestWarmSketchNeverOverAdmits(t *testing.T) {
	t.Parallel()
	for i, w := range []window.WarmUp{
		window.NewWarmUp(time.Second, 5*time.Second, 10, 0),
		window.NewWarmUp(time.Minute, time.Minute, 100, 10),
		window.NewWarmUp(time.Second, time.Second, 3, 1),
	} {
		iv := int64(w.Unit().Stable * 1000)
		for _, sc := range sketchCases {
			t.Run(fmt.Sprintf("%s/T=%v/burst=%d", sc.name, time.Duration(iv), w.Unit().Burst), func(t *testing.T) {
				t.Parallel()
				tb, err := NewWarmTable(w, NewKeys(1))
				require.NoError(t, err)
				fill(t, tb)
				tb.strangers.Store(newTATSketch(sc.width))
				ref := make([]window.Warm, sc.keys)
				seen := make([]bool, sc.keys)
				names := sketchKeys(sc.keys)
				rng := rand.New(rand.NewPCG(42, uint64(i)))
				now := base + 321
				var admitted, falseDenials int
				for step := range 20000 {
					now += gap(rng, iv/sc.perIv)
					k := rng.IntN(sc.keys)
					key := names[k]
					n := 1 + rng.Int64N(min(w.Unit().Burst, 3))
					if !seen[k] {
						ref[k], seen[k] = w.Fresh(now), true
					}
					next, ok, _, _, _ := w.Check(ref[k], now, n)
					switch o := tb.Allow(key, now, n); {
					case o.Allowed:
						require.True(t, ok, "step %d: %s admitted past its own warm-up", step, key)
						ref[k] = next
						admitted++
					case ok:
						falseDenials++
						require.Positive(t, o.RetryAfter)
					}
					if step%101 == 0 {
						for j := range ref {
							// testify only on a failure (as above).
							if e := tb.sketch().estimate(names[j]); seen[j] && e < ref[j].Next {
								require.GreaterOrEqual(t, e, ref[j].Next, "step %d: the sketch bounds key-%d", step, j)
							}
						}
					}
				}
				require.Positive(t, admitted)
				t.Logf("%d admitted, %d denied that the key's own warm-up admits (it runs at its cold rate)", admitted, falseDenials)
			})
		}
		t.Run(fmt.Sprintf("cold rate/T=%v", time.Duration(iv)), func(t *testing.T) {
			t.Parallel()
			tb, err := NewWarmTable(w, NewKeys(1))
			require.NoError(t, err)
			fill(t, tb)
			now := base
			step := int64(window.ColdFactor*w.Unit().Stable*1000) + 1000 // 3T and a µs
			for c := range 200 {
				require.True(t, tb.Allow("alone", now, 1).Allowed, "check %d at the cold rate", c)
				now += step
			}
			if w.Unit().Burst == 1 {
				require.False(t, tb.Allow("alone", now-step+int64(2*w.Unit().Stable*1000), 1).Allowed, "faster than the cold rate, at Burst 1")
			}
		})
	}
}

// TestLogSketchNeverOverAdmits: every admission a LogTable makes for a key
// it does not track is one reference.Log, the exact log of that key's own
// admissions, makes too. Crowded, some keys are denied under their limit;
// alone, a key offered 0.9·Limit per window, evenly, is never denied.
func TestLogSketchNeverOverAdmits(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		win   time.Duration
		limit int64
	}{{time.Second, 10}, {time.Minute, 100}, {time.Second + 7*time.Millisecond, 3}} {
		for _, sc := range sketchCases {
			t.Run(fmt.Sprintf("%s/%v/%d", sc.name, tc.win, tc.limit), func(t *testing.T) {
				t.Parallel()
				tb, err := NewLogTable(tc.win, tc.limit, NewKeys(1))
				require.NoError(t, err)
				fill(t, tb)
				tb.strangers.Store(newWinSketch(tb.geo, sc.width, tb.geo.Span()))
				refs := make([]*reference.Log, sc.keys)
				for k := range refs {
					refs[k] = reference.NewLog(tc.win, tc.limit)
				}
				rng := rand.New(rand.NewPCG(43, uint64(i)))
				iv := int64(tc.win) / tc.limit
				now := base
				var admitted, falseDenials int
				for step := range 20000 {
					now += gap(rng, iv/sc.perIv)
					k := rng.IntN(sc.keys)
					n := 1 + rng.Int64N(min(tc.limit, 3))
					fits := refs[k].InWindow(now)+n <= tc.limit
					o := tb.Allow(fmt.Sprint("key-", k), now, n)
					switch {
					case o.Allowed:
						require.True(t, refs[k].Allow(now, n), "step %d: key-%d admitted past its own log", step, k)
						admitted++
					case fits:
						falseDenials++
					}
					if !o.Allowed {
						require.Positive(t, o.RetryAfter)
					}
				}
				require.Positive(t, admitted)
				if sc.crowded {
					assert.Positive(t, falseDenials, "a crowded sketch denies some keys under their limit")
				}
				t.Logf("%d admitted, %d denied under the key's own limit", admitted, falseDenials)
			})
		}
		t.Run(fmt.Sprintf("steady/%v/%d", tc.win, tc.limit), func(t *testing.T) {
			t.Parallel()
			tb, err := NewLogTable(tc.win, tc.limit, NewKeys(1))
			require.NoError(t, err)
			fill(t, tb)
			step := int64(tc.win) * 10 / (9 * tc.limit) // 0.9·Limit per window
			now := base + 12345
			for c := range 20 * tc.limit {
				require.True(t, tb.Allow("steady", now, 1).Allowed, "check %d", c)
				now += step
			}
		})
	}
}
