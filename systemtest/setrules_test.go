package systemtest

import (
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

// TestFleetSetRulesUnderLoad runs three limiters on one real Redis, four
// goroutines each calling Allow on two rules, while every instance reloads
// its rules over and over at its own moments: one rule never changes, one
// has its limit retuned back and forth, one is added and removed. Redis
// ends up counting exactly what the fleet admitted for the unchanged and the
// retuned rule: SetRules loses no counts of a rule whose geometry stays.
// While instances disagree on the limit the fleet stays within the highest
// of them plus the error budget.
func TestFleetSetRulesUnderLoad(t *testing.T) {
	t.Parallel()
	const (
		n   = 3
		g   = 4
		eps = 0.01
	)
	steady := policy.Rule{Name: "steady", Limit: 1 << 30, Window: time.Minute}
	tuned := policy.Rule{Name: "tuned", Limit: 2000, Window: time.Minute}
	extra := policy.Rule{Name: "extra", Limit: 10, Window: time.Minute}
	srv := redistest.Start(t)
	// A long Timeout: under -race on a busy machine a check's urgent sync
	// can take longer than the default 50ms, and a store taken for down
	// puts the rules on their failure mode, whose bound around an outage
	// is L(2+ε) (docs/design-failures.md, "Known limits"), not what this test is about.
	opts := sluice.Options{ErrorBudget: eps, SyncInterval: 20 * time.Millisecond, Timeout: 2 * time.Second}
	ls := fleet(t, n, func() redis.UniversalClient { return srv.Client(t) }, opts, steady, tuned)

	stop := make(chan struct{})
	var reloads sync.WaitGroup
	for i, l := range ls {
		reloads.Add(1)
		go func() {
			defer reloads.Done()
			for it := 0; ; it++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(3+i) * time.Millisecond):
				}
				t2 := tuned
				t2.Limit = tuned.Limit + int64(it%2)*1000
				set := []policy.Rule{steady, t2}
				if (it+i)%3 == 0 {
					set = append(set, extra)
				}
				if err := l.SetRules(set...); err != nil {
					t.Errorf("SetRules: %v", err)
					return
				}
			}
		}()
	}
	var steadyN, tunedN []int64
	var load sync.WaitGroup
	load.Add(2)
	go func() { defer load.Done(); steadyN = hammer(t, ls, g, "steady", "k", nil, stop) }()
	go func() { defer load.Done(); tunedN = hammer(t, ls, g, "tuned", "k", nil, stop) }()
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	load.Wait()
	reloads.Wait()
	flushAll(t, ls)
	flushAll(t, ls)

	require.Positive(t, total(steadyN))
	c := srv.Client(t)
	assert.Equal(t, total(steadyN), sum(buckets(t, c, "sluice", "steady", "k", rulegeo.SubWindow(steady))), "Redis counts exactly what the fleet admitted (unchanged rule)")
	assert.Equal(t, total(tunedN), sum(buckets(t, c, "sluice", "tuned", "k", rulegeo.SubWindow(tuned))), "Redis counts exactly what the fleet admitted (retuned rule)")
	assert.LessOrEqual(t, total(tunedN), int64(float64(tuned.Limit+1000)*(1+eps)), "within the highest limit any instance had, and the error budget")
	for _, l := range ls {
		assert.False(t, l.Stats().Degraded)
	}
	t.Logf("admitted: steady %d, tuned %d", total(steadyN), total(tunedN))
}
