package systemtest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// call is one admitted check: when its call began and when it returned.
type call struct{ start, end time.Time }

// busiestWindow returns the most admissions whose whole call lies inside one
// real window of length w (start at or after the window's start, end at or
// before its end), over every window that starts at an admission's start.
func busiestWindow(calls []call, w time.Duration) (most int, at time.Time) {
	slices.SortFunc(calls, func(a, b call) int { return a.start.Compare(b.start) })
	for i, c := range calls {
		end := c.start.Add(w)
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

// busiestFixed returns the most admissions whose whole call lies inside one
// window of a fixed window rule of length w: [m·w, (m+1)·w) on the store
// clock, offset ahead of the local one.
func busiestFixed(calls []call, w, offset time.Duration) (most int, at time.Time) {
	per := map[int64]int{}
	for _, c := range calls {
		m := c.start.Add(offset).UnixNano() / int64(w)
		if c.end.Add(offset).UnixNano()/int64(w) == m {
			per[m]++
			if per[m] > most {
				most, at = per[m], time.Unix(0, m*int64(w)).Add(-offset)
			}
		}
	}
	return most, at
}

// TestStoreLoss makes Redis lose everything it holds in the middle of a run,
// by FLUSHALL or by a restart without persistence, while four instances
// hammer one key of an Eventual rule, and counts the admissions in every
// real window (only those whose whole call lies inside it; for a fixed
// window rule, in each of its windows). Before the
// rebuild (docs/failure-modes.md, "Redis loses its data") the window around
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
		eps   = 0.1
	)
	cases := []struct {
		name string
		rule policy.Rule
		lose func(t *testing.T, srv *redistest.Server)
	}{
		{"sliding/flushall", policy.Rule{Name: "api", Limit: limit, Window: time.Second}, flushAllData},
		{"sliding/restarted-empty", policy.Rule{Name: "api", Limit: limit, Window: time.Second}, restartEmpty},
		{"fixed/flushall", policy.Rule{Name: "api", Limit: limit, Window: time.Second, Algorithm: policy.FixedWindow}, flushAllData},
		{"fixed/restarted-empty", policy.Rule{Name: "api", Limit: limit, Window: time.Second, Algorithm: policy.FixedWindow}, restartEmpty},
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
								mine = append(mine, call{start, time.Now()})
							}
							time.Sleep(200 * time.Microsecond)
						}
					}()
				}
			}
			time.Sleep(1500 * time.Millisecond) // the fleet at its limit
			lost := time.Now()
			tc.lose(t, srv)
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

			most, at := busiestWindow(calls, tc.rule.Window)
			if tc.rule.Algorithm == policy.FixedWindow {
				// A fixed window bounds its own windows, not every real
				// one (2·L can fall across a boundary).
				most, at = busiestFixed(calls, tc.rule.Window, ls[0].Stats().Sync.Offset)
			}
			bound := limit + int(eps*limit)
			t.Logf("%d admitted; busiest real window %d, %v after the loss%s", len(calls), most, at.Sub(lost).Round(time.Millisecond), syncCounts(ls))
			assert.LessOrEqual(t, most, bound, "every real window within L(1+ε)")
			for i, l := range ls {
				assert.Equal(t, int64(1), l.Stats().Sync.Rebuilds, "instance %d rebuilt once", i)
				assert.True(t, l.Stats().Sync.Healthy, "instance %d healthy again", i)
			}
		})
	}
}

// flushAllData empties the store under the fleet.
func flushAllData(t *testing.T, srv *redistest.Server) {
	require.NoError(t, srv.Client(t).FlushAll(context.Background()).Err())
}

// restartEmpty kills the store and starts it again, empty, on its port.
func restartEmpty(t *testing.T, srv *redistest.Server) {
	srv.Kill()
	srv.Restart()
}
