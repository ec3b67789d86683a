package sluice_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// skewedClock is the system clock shifted by a fixed amount.
type skewedClock time.Duration

func (c skewedClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// TestSkewedClocksAgree gives four instances local clocks off by up to ±2 s:
// aligned on the store's clock, they agree on window boundaries, so a fixed
// window of 1 s still holds at most L(1+ε) in every window and the offsets
// they measured cancel the skew.
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
	var wg sync.WaitGroup
	stop := make(chan struct{})
	time.AfterFunc(2500*time.Millisecond, func() { close(stop) })
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			shift := skews[i] + l.Stats().Sync.Offset
			for {
				select {
				case <-stop:
					return
				default:
				}
				d, err := l.Allow(context.Background(), rule.Name, "k")
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					end := time.Now().Add(shift + d.ResetAfter).UnixNano()
					w := int64(rule.Window)
					mu.Lock()
					perWindow[(end+w/2)/w-1]++
					mu.Unlock()
				}
				time.Sleep(200 * time.Microsecond)
			}
		}()
	}
	wg.Wait()
	bound := int64(float64(rule.Limit) * 1.05)
	require.GreaterOrEqual(t, len(perWindow), 2, "the run spans several windows")
	var admitted int64
	for j, n := range perWindow {
		admitted += n
		assert.LessOrEqual(t, n, bound, "window %d", j)
	}
	flushAll(t, ls)
	// The current window's total in Redis matches what the test counted.
	last := buckets(t, srv.Client(t), "sluice", rule.Name, "k", rule.SubWindow())
	for j, n := range last {
		assert.Equal(t, perWindow[j], n, "window %d in Redis", j)
	}
	t.Logf("admitted %d; per window %v", admitted, perWindow)
}
