package systemtest

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
)

// call is one admitted check: when its call began and when it returned, and
// its Decision's ResetAfter (for a fixed window, until the end of the window
// the admission was counted in, as its instance saw it).
type call struct {
	start, end time.Time
	reset      time.Duration
}

// busiestWindow returns the most admissions whose whole call lies inside one
// real window of length w (start at or after the window's start, end at or
// before its end), over every window that starts at an admission's start,
// and over those that also hold the instant around (if not zero).
func busiestWindow(calls []call, w time.Duration, around time.Time) (most int, at time.Time) {
	slices.SortFunc(calls, func(a, b call) int { return a.start.Compare(b.start) })
	for i, c := range calls {
		end := c.start.Add(w)
		if !around.IsZero() && (c.start.After(around) || end.Before(around)) {
			continue
		}
		n := 0
		for _, d := range calls[i:] {
			if d.start.After(end) {
				break
			}
			if !d.end.After(end) {
				n++
			}
		}
		if n > most {
			most, at = n, c.start
		}
	}
	return most, at
}

// busiestFixed returns the most admissions counted in one window of a fixed
// window rule of length w: [m·w, (m+1)·w) on the store clock, offset ahead
// of the local one; only the window that holds the instant around, if not
// zero. Each admission counts in the window its Decision names (the one
// ending ResetAfter after the check was decided), not in the one its call
// fell in by the test's clock. Each instance places the store's boundaries
// through its own measured offset, off by up to half a heartbeat's round
// trip (docs/design.md, "The counting math": the bound holds up to the
// clock offset). An instance whose offset is 1.5 ms too large starts the
// next window 1.5 ms early and admits on its lease of it while the test's
// clock is still in the window before. The check was decided between its
// call's start and end, so its window ends within half the call, plus the
// published time's staleness, of the call's middle plus ResetAfter: far
// less than half a window.
func busiestFixed(calls []call, w, offset time.Duration, around time.Time) (most int, at time.Time) {
	per := map[int64]int{}
	for _, c := range calls {
		mid := c.start.Add(c.end.Sub(c.start) / 2)
		m := (mid.Add(c.reset).Add(offset).UnixNano()+int64(w)/2)/int64(w) - 1
		if !around.IsZero() && around.Add(offset).UnixNano()/int64(w) != m {
			continue
		}
		per[m]++
		if per[m] > most {
			most, at = per[m], time.Unix(0, m*int64(w)).Add(-offset)
		}
	}
	return most, at
}

// TestBusiestFixed: a fixed window's admissions count in the window their
// decisions name, including a call that lies wholly before that window by
// the test's clock (its instance's offset ran ahead) and one that straddles
// a boundary.
func TestBusiestFixed(t *testing.T) {
	t.Parallel()
	const w = time.Second
	base := time.Unix(1_000_000, 0) // a window's start on the store clock
	// admit returns n calls starting at start, each lasting d, decided when
	// the window they count in has reset left.
	admit := func(n int, start time.Time, d, reset time.Duration) []call {
		cs := make([]call, n)
		for i := range cs {
			cs[i] = call{start, start.Add(d), reset}
		}
		return cs
	}
	full := admit(110, base.Add(10*time.Millisecond), time.Microsecond, 990*time.Millisecond)
	cases := []struct {
		name   string
		calls  []call
		offset time.Duration
		around time.Time
		most   int
		at     time.Time
	}{
		{"full window", full, 0, time.Time{}, 110, base},
		// 0.5 ms before the boundary by the test's clock, its instance
		// 0.3 ms into the next window: a real window holding 111.
		{"instance ahead", append(admit(1, base.Add(999500*time.Microsecond), time.Microsecond, 999700*time.Microsecond), full...), 0, time.Time{}, 110, base},
		// Across the boundary, decided 1.5 ms before it: it counts.
		{"call across the boundary", append(admit(1, base.Add(998*time.Millisecond), 5*time.Millisecond, 1500*time.Microsecond), full...), 0, time.Time{}, 111, base},
		{"around", append(admit(5, base.Add(1200*time.Millisecond), time.Microsecond, 800*time.Millisecond), full...), 0, base.Add(1500 * time.Millisecond), 5, base.Add(w)},
		// The store clock 300 ms ahead: local 0.8 s is 0.1 s into window 1.
		{"offset", admit(7, base.Add(800*time.Millisecond), time.Microsecond, 900*time.Millisecond), 300 * time.Millisecond, time.Time{}, 7, base.Add(w - 300*time.Millisecond)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			most, at := busiestFixed(slices.Clone(tc.calls), w, tc.offset, tc.around)
			assert.Equal(t, tc.most, most)
			assert.True(t, tc.at.Equal(at), "window at %v, want %v", at, tc.at)
		})
	}
}

// TestStoreLoss makes Redis lose everything it holds in the middle of a run,
// by FLUSHALL or by a restart without persistence, while four instances
// hammer one key of an Eventual rule, and counts the admissions in every
// real window (only those whose whole call lies inside it; for a fixed
// window rule, in each of its windows, as the admissions' decisions name
// them: busiestFixed). Before the
// rebuild (docs/design-failures.md, "When the store loses its data") the window around
// the loss held up to twice the limit: the store's totals were gone while
// every instance still knew what it had admitted. Now each instance that
// sees the store's new epoch treats the store as down, restores what it saw,
// and the fleet recovers as from an outage: every real window stays within
// the bound, and Redis ends up holding at least what was admitted in the
// window (the restored counts and those pushed since).
func TestStoreLoss(t *testing.T) {
	t.Parallel()
	const (
		n     = 4
		g     = 2
		limit = 100
		eps   = 0.1 // as a fraction of the limit: 10

	)
	sliding := policy.Rule{Name: "api", Limit: limit, Window: time.Second}
	fixed := policy.Rule{Name: "api", Limit: limit, Window: time.Second, Algorithm: policy.FixedWindow}
	bucket := policy.Rule{Name: "api", Limit: limit, Window: time.Second, Algorithm: policy.TokenBucket}
	cases := []struct {
		name string
		rule policy.Rule
		lose func(t *testing.T, srv *redistest.Server) time.Time // the loss, when it happened
		// after is how long the fleet runs before the loss; w the length
		// of the real windows counted, bound the most one may hold.
		after time.Duration
		w     time.Duration
		bound int
	}{
		{"sliding/flushall", sliding, flushAllData, 1500 * time.Millisecond, time.Second, limit + eps*limit},
		{"sliding/restarted-empty", sliding, restartEmpty, 1500 * time.Millisecond, time.Second, limit + eps*limit},
		{"fixed/flushall", fixed, flushAllData, 1500 * time.Millisecond, time.Second, limit + eps*limit},
		{"fixed/restarted-empty", fixed, restartEmpty, 1500 * time.Millisecond, time.Second, limit + eps*limit},
		// Right after a window starts: the instances hold leases of it
		// granted ahead, which no pull has counted in it yet: each
		// restores its own.
		{"fixed/flushall-at-start", fixed, atWindowStart(time.Second, flushAllData), 1500 * time.Millisecond, time.Second, limit + eps*limit},
		{"sliding/flushall-at-bucket-start", sliding, atWindowStart(rulegeo.SubWindow(sliding), flushAllData), 1500 * time.Millisecond, time.Second, limit + eps*limit},
		// A bucket admits at most Burst + ⌊ε·Burst⌋ + r·w in any w
		// (window.SplitBucket): the loss comes right after the fleet
		// drained a full bucket, which a store that forgot the key
		// would hand out again.
		{"tokenbucket/flushall", bucket, flushAllData, 300 * time.Millisecond, 500 * time.Millisecond, limit + eps*limit + limit/2},
		{"tokenbucket/restarted-empty", bucket, restartEmpty, 300 * time.Millisecond, 500 * time.Millisecond, limit + eps*limit + limit/2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			opts := sluice.Options{ErrorBudget: eps, SyncInterval: 50 * time.Millisecond, Timeout: time.Second, MinInstances: n}
			ls := fleet(t, n, func() redis.UniversalClient { return srv.Client(t) }, opts, tc.rule)

			var (
				mu    sync.Mutex
				calls []call
				wg    sync.WaitGroup
			)
			stop := make(chan struct{})
			for _, l := range ls {
				for range g {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var mine []call
						defer func() {
							mu.Lock()
							calls = append(calls, mine...)
							mu.Unlock()
						}()
						for {
							select {
							case <-stop:
								return
							default:
							}
							start := time.Now()
							d, err := l.Allow(context.Background(), tc.rule.Name, "k")
							if err != nil {
								t.Errorf("Allow: %v", err)
								return
							}
							if d.Allowed {
								mine = append(mine, call{start, time.Now(), d.ResetAfter})
							}
							time.Sleep(200 * time.Microsecond)
						}
					}()
				}
			}
			time.Sleep(tc.after) // the fleet at its limit
			lost := tc.lose(t, srv)
			waitFor(t, 10*time.Second, "every instance to see the loss", func() bool {
				for _, l := range ls {
					if l.Stats().Sync.Rebuilds == 0 {
						return false
					}
				}
				return true
			})
			time.Sleep(2 * time.Second) // the window after the loss, and the next
			close(stop)
			wg.Wait()

			busiest := func(around time.Time) (int, time.Time) {
				if tc.rule.Algorithm == policy.FixedWindow {
					// A fixed window bounds its own windows, not every
					// real one (2·L can fall across a boundary).
					return busiestFixed(calls, tc.rule.Window, ls[0].Stats().Sync.Offset, around)
				}
				return busiestWindow(calls, tc.w, around)
			}
			most, at := busiest(time.Time{})
			mostAround, _ := busiest(lost)
			t.Logf("%d admitted; busiest window %d, %v after the loss; busiest holding the loss %d%s",
				len(calls), most, at.Sub(lost).Round(time.Millisecond), mostAround, syncCounts(ls))
			assert.LessOrEqual(t, most, tc.bound, "every real window within the bound")
			for i, l := range ls {
				assert.Equal(t, int64(1), l.Stats().Sync.Rebuilds, "instance %d rebuilt once", i)
				assert.True(t, l.Stats().Sync.Healthy, "instance %d healthy again", i)
			}
		})
	}
}

// atWindowStart returns lose run a millisecond after the next multiple of w
// on the store's clock (the test's Redis runs on this machine).
func atWindowStart(w time.Duration, lose func(*testing.T, *redistest.Server) time.Time) func(*testing.T, *redistest.Server) time.Time {
	return func(t *testing.T, srv *redistest.Server) time.Time {
		tm, err := srv.Client(t).Time(context.Background()).Result()
		require.NoError(t, err)
		now := tm.UnixNano()
		next := (now/int64(w) + 1) * int64(w)
		time.Sleep(time.Duration(next-now) + time.Millisecond)
		return lose(t, srv)
	}
}

// flushAllData empties the store under the fleet.
func flushAllData(t *testing.T, srv *redistest.Server) time.Time {
	at := time.Now()
	require.NoError(t, srv.Client(t).FlushAll(context.Background()).Err())
	return at
}

// restartEmpty kills the store and starts it again, empty, on its port.
func restartEmpty(t *testing.T, srv *redistest.Server) time.Time {
	at := time.Now()
	srv.Kill()
	srv.Restart()
	return at
}

// TestStoreLossAfterOperations: what an operator does before a store loses
// its data — a key's traffic moving between two instances, each restarted
// under a new id, a reload raising the limit — leaves the instances' views
// able to restore it: a FLUSHALL then lets the fleet admit only what the
// raised limit has left, within the budget. Every instance that admitted the
// key's counts is gone but the last ones, which pulled them.
func TestStoreLossAfterOperations(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const eps = 0.01
	rule := policy.Rule{Name: "api", Limit: 100, Window: time.Minute}
	raised := rule
	raised.Limit = 150
	open := func(rules ...policy.Rule) *sluice.Limiter {
		l, err := sluice.New(sluice.Options{Redis: srv.Client(t), ErrorBudget: eps, Logger: slog.New(slog.DiscardHandler)}, rules...)
		require.NoError(t, err)
		return l
	}
	ctx := context.Background()
	admitted := 0
	offer := func(l *sluice.Limiter, n int) (got int) {
		for range n {
			d, err := l.Allow(ctx, "api", "k")
			require.NoError(t, err)
			if d.Allowed {
				got++
			}
		}
		require.NoError(t, l.Flush(ctx))
		admitted += got
		return got
	}
	restart := func(l *sluice.Limiter, rules ...policy.Rule) *sluice.Limiter {
		require.NoError(t, l.Close())
		return open(rules...)
	}
	a, b := open(rule), open(rule)
	// Up to 0.9·L, moving between instances: nothing is denied.
	assert.Equal(t, 30, offer(a, 30))
	assert.Equal(t, 20, offer(b, 20))
	a = restart(a, rule)
	assert.Equal(t, 20, offer(a, 20))
	b = restart(b, rule)
	assert.Equal(t, 10, offer(b, 10))
	require.NoError(t, a.SetRules(raised))
	require.NoError(t, b.SetRules(raised))
	assert.Equal(t, 30, offer(a, 30))
	assert.Equal(t, 20, offer(b, 20))
	require.Equal(t, 130, admitted)

	require.NoError(t, srv.Client(t).FlushAll(ctx).Err())
	for range 5 {
		offer(a, 10)
		offer(b, 10)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	bound := int(float64(raised.Limit) * (1 + eps))
	t.Logf("admitted %d in the window (bound %d)", admitted, bound)
	assert.LessOrEqual(t, admitted, bound, "the store's loss does not reopen the window")
	assert.Positive(t, admitted-130, "the fleet goes on admitting what the raised limit has left")
}
