package systemtest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
)

// skewedClock is the system clock shifted by a fixed amount.
type skewedClock time.Duration

func (c skewedClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// TestSkewedClocksAgree gives four instances local clocks off by up to ±2 s:
// aligned on the store's clock, they agree on window boundaries, so a fixed
// window of 1 s still holds at most L(1+ε) in every window, the offsets
// they measured cancel the skew, and the store counts the admissions in the
// windows the checks were told of.
func TestSkewedClocksAgree(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rule := policy.Rule{Name: "skew", Limit: 200, Window: time.Second, Algorithm: policy.FixedWindow}
	skews := []time.Duration{-2 * time.Second, -time.Second, time.Second, 2 * time.Second}
	ls := make([]*sluice.Limiter, len(skews))
	for i, skew := range skews {
		l, err := sluice.New(sluice.Options{Redis: srv.Client(t), Clock: skewedClock(skew), ErrorBudget: 0.05}, rule)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		ls[i] = l
	}
	flushAll(t, ls)
	for i, l := range ls {
		off := l.Stats().Sync.Offset
		assert.InDelta(t, float64(-skews[i]), float64(off), float64(50*time.Millisecond), "instance %d measured offset %v for skew %v", i, off, skews[i])
	}

	// Hammer for a bit over two windows. Each admission's window is known
	// from its decision: the window ends ResetAfter after the store time of
	// the check (local clock + skew + measured offset), so it is the nearest
	// multiple of the window length.
	perWindow := map[int64]int64{}
	var mu sync.Mutex
	stop := make(chan struct{})
	time.AfterFunc(2500*time.Millisecond, func() { close(stop) })
	shifts := make([]time.Duration, len(ls))
	for i, l := range ls {
		shifts[i] = skews[i] + l.Stats().Sync.Offset
	}
	perLimiter(ls, stop, func(i int, l *sluice.Limiter, _ int) bool {
		d, err := l.Allow(context.Background(), rule.Name, "k")
		if !assert.NoError(t, err) {
			return false
		}
		if d.Allowed {
			end := time.Now().Add(shifts[i] + d.ResetAfter).UnixNano()
			w := int64(rule.Window)
			mu.Lock()
			perWindow[(end+w/2)/w-1]++
			mu.Unlock()
		}
		time.Sleep(200 * time.Microsecond)
		return true
	})()
	bound := int64(float64(rule.Limit) * 1.05)
	require.GreaterOrEqual(t, len(perWindow), 2, "the run spans several windows")
	var admitted int64
	for j, n := range perWindow {
		admitted += n
		assert.LessOrEqual(t, n, bound, "window %d", j)
	}
	closeAll(t, ls)
	// The windows Redis still holds (the run's last) count what the test
	// counted in them: a clock the fleet did not align on would put the
	// counts in other windows. They may count more, never less, and within
	// the bound: on a loaded machine (four CPU burners on two cores, -race)
	// about one run in fifteen read 12 to 47 units more in the last window
	// than the instances admitted in it, after Close, with no failed round
	// trip; that surplus, a utilization loss for the rest of the window, is
	// not explained yet.
	last := buckets(t, srv.Client(t), "sluice", rule.Name, "k", rulegeo.SubWindow(rule))
	for j, n := range last {
		assert.GreaterOrEqual(t, n, perWindow[j], "window %d in Redis%s", j, syncCounts(ls))
		assert.LessOrEqual(t, n, bound, "window %d in Redis", j)
		if n != perWindow[j] {
			t.Logf("window %d: Redis %d, admitted %d%s", j, n, perWindow[j], syncCounts(ls))
		}
	}
	t.Logf("admitted %d; per window %v", admitted, perWindow)
}

// TestSkewedClocksSliding is TestSkewedClocksAgree for a sliding window
// (1s in 10 sub-windows of 100ms): four instances with local clocks off by
// up to ±2s — twenty sub-windows — hammer one key. Watching Redis's
// per-bucket totals during the run shows that they agree on the store
// clock's buckets: every count lands in a bucket of the run's store-time
// span (a local clock would put them twenty buckets away, where Redis drops
// or clamps them), the buckets add up to what was admitted (within what
// need-driven sync lets a bucket leave the window with), and every ten
// consecutive buckets — the window as the estimate sees it at a bucket
// boundary — hold at most Limit·(1+ErrorBudget).
func TestSkewedClocksSliding(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	direct := srv.Client(t)
	rule := policy.Rule{Name: "skew", Limit: 200, Window: time.Second, Precision: 10}
	const eps = 0.05
	skews := []time.Duration{-2 * time.Second, -time.Second, time.Second, 2 * time.Second}
	ls := make([]*sluice.Limiter, len(skews))
	for i, skew := range skews {
		l, err := sluice.New(sluice.Options{Redis: srv.Client(t), Clock: skewedClock(skew), ErrorBudget: eps, MinInstances: len(skews)}, rule)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		ls[i] = l
	}
	flushAll(t, ls)
	ctx := context.Background()
	sub := rulegeo.SubWindow(rule).Microseconds()
	storeBucket := func() int64 {
		tm, err := direct.Time(ctx).Result()
		require.NoError(t, err)
		return tm.UnixMicro() / sub
	}
	seen := map[int64]int64{} // last total seen per bucket
	watch := func() {
		for j, n := range buckets(t, direct, "sluice", rule.Name, "k", rulegeo.SubWindow(rule)) {
			seen[j] = n
		}
	}

	first := storeBucket()
	var admitted atomic.Int64
	stop := make(chan struct{})
	wait := perLimiter(ls, stop, func(_ int, l *sluice.Limiter, _ int) bool {
		d, err := l.Allow(ctx, rule.Name, "k")
		if !assert.NoError(t, err) {
			return false
		}
		if d.Allowed {
			admitted.Add(1)
		}
		time.Sleep(200 * time.Microsecond)
		return true
	})
	// Buckets stay in the hash for about a window after they end: polling
	// every 20ms sees each one's final total. The polling goes on until the
	// limiters are closed (their final flushes push the last counts), which
	// on a loaded machine can take longer than a window.
	closed := make(chan []error)
	go func() {
		time.Sleep(2500 * time.Millisecond)
		close(stop)
		wait()
		errs := make([]error, len(ls))
		for i, l := range ls {
			errs[i] = l.Close()
		}
		closed <- errs
	}()
	var errs []error
	for errs == nil {
		watch()
		select {
		case errs = <-closed:
		case <-time.After(20 * time.Millisecond):
		}
	}
	for i, err := range errs {
		require.NoError(t, err, "Close of instance %d", i)
	}
	watch()
	last := storeBucket()

	var total int64
	for j, n := range seen {
		total += n
		// An instance's store time trails the store's by up to its offset's
		// error and the published tick's age: a count admitted right after
		// the run's first bucket started can land in the one before.
		assert.True(t, j >= first-1 && j <= last, "bucket %d outside the run's store-time buckets [%d, %d]", j, first-1, last)
	}
	// Redis's buckets hold what was admitted, up to what need-driven sync
	// lets a bucket leave the window with (docs/design-bound.md,
	// "Need-driven sync"): the pending counts of a key far from its limit and its cap
	// (fewer than the cap per instance), and the unused units of a lease
	// whose return waited for a sync of the key, which the store counted
	// until the bucket left. The test allows the larger of N·(cap−1) and
	// ε·L a window; six runs on a loaded machine (four CPU burners on two
	// cores, -race) read 0, 0, 0, 0, 3 and 11 units more than admitted
	// over three windows. A clock the fleet does not align on would lose
	// hundreds: counts twenty buckets off are dropped or clamped.
	bound := int64(float64(rule.Limit) * (1 + eps))
	b := int64(rulegeo.Buckets(rule))
	windows := (last - first + b) / b
	capv := int64(eps * float64(rule.Limit) / float64(len(ls)+1))
	assert.InDelta(t, admitted.Load(), total, float64(windows*max(int64(len(ls))*(capv-1), int64(eps*float64(rule.Limit)))),
		"Redis's buckets hold what was admitted (%d windows)%s", windows, syncCounts(ls))
	for j := first; j+b-1 <= last; j++ {
		var w int64
		for i := range b {
			w += seen[j+i]
		}
		assert.LessOrEqual(t, w, bound, "buckets %d..%d", j, j+b-1)
	}
	assert.Greater(t, last-first, 2*b, "the run spans more than two windows")
	t.Logf("admitted %d over buckets %d..%d: %v", admitted.Load(), first, last, seen)
}
