package systemtest

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// call is one admitted check: when its Allow call started and ended, in ns
// on the test's monotonic clock.
type call struct{ start, end int64 }

// maxInRealWindow returns the most admissions whose whole call lies inside
// one real interval of length w, and where that interval starts. An
// interval holding the most can always be slid right until it starts at
// some admission's start, so only those are tried.
func maxInRealWindow(calls []call, w int64) (most int, at int64) {
	calls = slices.Clone(calls)
	slices.SortFunc(calls, func(a, b call) int { return int(a.start - b.start) })
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
		calls []call
		w     int64
		want  int
	}{
		{"empty", nil, 10, 0},
		{"all inside", []call{{0, 1}, {2, 3}, {9, 10}}, 10, 3},
		{"a call ending past the window is not counted", []call{{0, 1}, {5, 11}, {10, 10}}, 10, 2},
		{"the best window starts later", []call{{0, 1}, {8, 9}, {12, 13}, {15, 17}}, 10, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, _ := maxInRealWindow(tc.calls, tc.w)
			require.Equal(t, tc.want, got)
		})
	}
}

// coldFleet starts n limiters at once, each hammering key with g goroutines
// from the moment its New returns, until d after the start; the first New
// is called at phase (a fraction) of a sub-window of rule on the local
// clock (on one host, the store's clock within a round trip). It returns
// every admitted call.
func coldFleet(t *testing.T, srv *redistest.Server, n, g int, opts sluice.Options, rule policy.Rule, phase float64, d time.Duration) []call {
	t.Helper()
	sub := int64(rule.SubWindow())
	now := time.Now().UnixNano()
	at := (now/sub+1)*sub + int64(phase*float64(sub))
	time.Sleep(time.Duration(at - now))
	base := time.Now()
	stop := base.Add(d)
	var mu sync.Mutex
	var calls []call
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opts
			o.Redis = srv.Client(t)
			l, err := sluice.New(o, rule)
			if !assertNoError(t, err) {
				return
			}
			t.Logf("N̂ at New: %d", l.Stats().Instances)
			defer func() { _ = l.Close() }() // the next run starts cold: no instance registered
			var hw sync.WaitGroup
			for range g {
				hw.Add(1)
				go func() {
					defer hw.Done()
					var mine []call
					for time.Now().Before(stop) {
						s := time.Since(base)
						dec, err := l.Allow(context.Background(), rule.Name, "k")
						e := time.Since(base)
						if err != nil {
							t.Errorf("Allow: %v", err)
							return
						}
						if dec.Allowed {
							mine = append(mine, call{int64(s), int64(e)})
						}
					}
					mu.Lock()
					calls = append(calls, mine...)
					mu.Unlock()
				}()
			}
			hw.Wait()
		}()
	}
	wg.Wait()
	return calls
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("New: %v", err)
		return false
	}
	return true
}

// TestFleetColdStart starts a fleet at once against one real Redis, every
// instance hammering one key from its first check, at two phases of a
// sub-window: no real window may hold more than Limit·(1+ErrorBudget)
// admissions, counting only those whose whole call lies inside it.
func TestFleetColdStart(t *testing.T) {
	t.Parallel()
	const (
		limit = 400
		eps   = 0.05
	)
	runs := 1
	if s := os.Getenv("SLUICE_COLD_RUNS"); s != "" {
		runs, _ = strconv.Atoi(s)
	}
	for _, n := range []int{4, 8} {
		for _, phase := range []float64{0, 0.5} {
			t.Run("n="+strconv.Itoa(n)+"/phase="+strconv.FormatFloat(phase, 'f', -1, 64), func(t *testing.T) {
				srv := redistest.Start(t)
				for run := range runs {
					rule := policy.Rule{Name: "cold" + strconv.Itoa(run), Limit: limit, Window: time.Second}
					opts := sluice.Options{ErrorBudget: eps, SyncInterval: 100 * time.Millisecond, Timeout: time.Second}
					if os.Getenv("SLUICE_COLD_MIN") != "" {
						opts.MinInstances = n
					}
					calls := coldFleet(t, srv, n, 2, opts, rule, phase, 2500*time.Millisecond)
					most, at := maxInRealWindow(calls, int64(rule.Window))
					t.Logf("run %d: admitted %d, at most %d in a real window (from %v)", run, len(calls), most, time.Duration(at))
					require.LessOrEqual(t, most, int(float64(limit)*(1+eps)))
				}
			})
		}
	}
}
