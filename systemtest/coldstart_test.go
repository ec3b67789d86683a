package systemtest

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
)

// timedCall is one admitted check: when its Allow call started and ended, in ns
// on the test's monotonic clock.
type timedCall struct{ start, end int64 }

// maxInRealWindow returns the most admissions whose whole call lies inside
// one real interval of length w, and where that interval starts. An
// interval holding the most can always be slid right until it starts at
// some admission's start, so only those are tried.
func maxInRealWindow(calls []timedCall, w int64) (most int, at int64) {
	calls = slices.Clone(calls)
	slices.SortFunc(calls, func(a, b timedCall) int { return int(a.start - b.start) })
	for i, c := range calls {
		n := 0
		for _, d := range calls[i:] {
			if d.start > c.start+w {
				break
			}
			if d.end <= c.start+w {
				n++
			}
		}
		if n > most {
			most, at = n, c.start
		}
	}
	return most, at
}

func TestMaxInRealWindow(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		calls []timedCall
		w     int64
		want  int
	}{
		{"empty", nil, 10, 0},
		{"all inside", []timedCall{{0, 1}, {2, 3}, {9, 10}}, 10, 3},
		{"a call ending past the window is not counted", []timedCall{{0, 1}, {5, 11}, {10, 10}}, 10, 2},
		{"the best window starts later", []timedCall{{0, 1}, {8, 9}, {12, 13}, {15, 17}}, 10, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, _ := maxInRealWindow(tc.calls, tc.w)
			require.Equal(t, tc.want, got)
		})
	}
}

// coldRun is what coldFleet saw: every admitted call, and what the fleet's
// first checks cost.
type coldRun struct {
	calls []timedCall
	// early and late count the checks started in the first 200 ms and
	// after; slowEarly and slowLate those of them that took 1 ms or more;
	// maxEarly and maxLate the longest.
	early, late, slowEarly, slowLate int
	maxEarly, maxLate                time.Duration
	// reservations, roundTrips and commands sum the instances' syncer
	// counters at the end of the run, before Close.
	reservations, roundTrips, commands int64
}

// coldFleet starts n limiters at once, each hammering key with g goroutines
// from the moment its New returns, until d after the start; the first New
// is called at phase (a fraction) of a sub-window of rule on the local
// clock (on one host, the store's clock within a round trip). Each limiter
// closes (and deregisters) before it returns: the next run starts cold.
func coldFleet(t *testing.T, srv *redistest.Server, n, g int, opts sluice.Options, rule policy.Rule, phase float64, d time.Duration) coldRun {
	t.Helper()
	sub := int64(rulegeo.SubWindow(rule))
	now := time.Now().UnixNano()
	at := (now/sub+1)*sub + int64(phase*float64(sub))
	time.Sleep(time.Duration(at - now))
	base := time.Now()
	stop := base.Add(d)
	const earlyEnd = 200 * time.Millisecond
	var mu sync.Mutex
	var run coldRun
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opts
			o.Redis = srv.Client(t)
			l, err := sluice.New(o, rule)
			if err != nil {
				t.Errorf("New: %v", err)
				return
			}
			defer func() { _ = l.Close() }()
			var hw sync.WaitGroup
			for range g {
				hw.Add(1)
				go func() {
					defer hw.Done()
					var mine coldRun
					for time.Now().Before(stop) {
						s := time.Since(base)
						dec, err := l.Allow(context.Background(), rule.Name, "k")
						e := time.Since(base)
						if err != nil {
							t.Errorf("Allow: %v", err)
							return
						}
						if dec.Allowed {
							mine.calls = append(mine.calls, timedCall{int64(s), int64(e)})
						}
						took := e - s
						if s < earlyEnd {
							mine.early++
							mine.maxEarly = max(mine.maxEarly, took)
							if took >= time.Millisecond {
								mine.slowEarly++
							}
						} else {
							mine.late++
							mine.maxLate = max(mine.maxLate, took)
							if took >= time.Millisecond {
								mine.slowLate++
							}
						}
					}
					mu.Lock()
					run.calls = append(run.calls, mine.calls...)
					run.early += mine.early
					run.late += mine.late
					run.slowEarly += mine.slowEarly
					run.slowLate += mine.slowLate
					run.maxEarly = max(run.maxEarly, mine.maxEarly)
					run.maxLate = max(run.maxLate, mine.maxLate)
					mu.Unlock()
				}()
			}
			hw.Wait()
			st := l.Stats().Sync
			mu.Lock()
			run.reservations += st.Reservations
			run.roundTrips += st.RoundTrips
			run.commands += st.Commands
			mu.Unlock()
		}()
	}
	wg.Wait()
	return run
}

// TestFleetColdStart starts a fleet at once against one real Redis, every
// instance hammering one key from its first check, at two phases of a
// sub-window: no real window may hold more than Limit·(1+ErrorBudget)
// admissions, counting only those whose whole call lies inside it (a
// descheduled caller cannot blur the count). Each instance's first
// heartbeat sees only the instances registered before it, and those see it
// only at their next: until then the caps are sized on a fleet without it
// (docs/design-bound.md, "Joining the fleet"). SLUICE_COLD_RUNS sets the runs per
// case (default 1).
func TestFleetColdStart(t *testing.T) {
	t.Parallel()
	const (
		limit = 400
		eps   = 0.05
	)
	runs := 1
	if s := os.Getenv("SLUICE_COLD_RUNS"); s != "" {
		var err error
		runs, err = strconv.Atoi(s)
		require.NoError(t, err, "SLUICE_COLD_RUNS")
	}
	bound := int(float64(limit) * (1 + eps))
	for _, n := range []int{4, 8} {
		for _, phase := range []float64{0, 0.5} {
			t.Run("n="+strconv.Itoa(n)+"/phase="+strconv.FormatFloat(phase, 'f', -1, 64), func(t *testing.T) {
				srv := redistest.Start(t)
				for run := range runs {
					rule := policy.Rule{Name: "cold" + strconv.Itoa(run), Limit: limit, Window: time.Second}
					// A Timeout no loaded machine reaches: a check that
					// times out is decided within its instance's part of
					// the room left, which lets a window reach further
					// (TestFleetBound).
					opts := sluice.Options{ErrorBudget: eps, SyncInterval: 100 * time.Millisecond, Timeout: time.Second}
					r := coldFleet(t, srv, n, 2, opts, rule, phase, 1500*time.Millisecond)
					most, at := maxInRealWindow(r.calls, int64(rule.Window))
					t.Logf("run %d: admitted %d, at most %d in a real window (from %v); checks in the first 200 ms %d (%d took 1 ms or more, the longest %v), after %d (%d, %v); reservations %d, round trips %d, commands %d",
						run, len(r.calls), most, time.Duration(at).Round(time.Millisecond),
						r.early, r.slowEarly, r.maxEarly.Round(10*time.Microsecond), r.late, r.slowLate, r.maxLate.Round(10*time.Microsecond),
						r.reservations, r.roundTrips, r.commands)
					assert.LessOrEqual(t, most, bound, "run %d: admissions in a real window", run)
					assert.GreaterOrEqual(t, len(r.calls), limit*9/10, "run %d: the fleet uses its limit", run)
				}
			})
		}
	}
}
