package sluice_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// admissions records the order in which queued waiters are admitted: each
// waiter's context carries its index (see admitted).
type admissions struct {
	mu    sync.Mutex
	order []int
	seen  map[int]bool
}

type waiterIndex struct{}

func init() {
	sluice.SetWaitAdmitted(func(ctx context.Context) {
		if a, ok := ctx.Value(admissionsKey{}).(*admissions); ok {
			a.add(ctx.Value(waiterIndex{}).(int))
		}
	})
}

type admissionsKey struct{}

// ctx returns waiter i's context, recorded in a.
func (a *admissions) ctx(parent context.Context, i int) context.Context {
	return context.WithValue(context.WithValue(parent, admissionsKey{}, a), waiterIndex{}, i)
}

// add records waiter i's admission, once: the hook sees a queued waiter,
// the waiter itself (after Wait returns) one admitted at once, when no one
// was queued.
func (a *admissions) add(i int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = map[int]bool{}
	}
	if !a.seen[i] {
		a.seen[i] = true
		a.order = append(a.order, i)
	}
}

// newWaitLimiter returns a store-less limiter on the system clock.
func newWaitLimiter(t *testing.T, opts sluice.Options, rules ...policy.Rule) *sluice.Limiter {
	t.Helper()
	l, err := sluice.New(opts, rules...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// queueInOrder starts waiters one by one, each once the one before is
// queued (or already through), so that their arrival order is their index;
// wait(i) runs in waiter i's goroutine.
func queueInOrder(t *testing.T, l *sluice.Limiter, count int, wait func(i int)) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	var through atomic.Int64
	for i := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer through.Add(1)
			wait(i)
		}()
		// Queued or through: a waiter between leaving the queue and the
		// count counts in neither, so this never holds early.
		require.Eventually(t, func() bool { return l.Stats().Waiters+through.Load() >= int64(i)+1 }, 10*time.Second, 20*time.Microsecond, "waiter %d queued", i)
	}
	return &wg
}

// TestWaitFIFO: 100 goroutines wait on one key of a 50/s leaky bucket:
// they are admitted in the order they arrived, never faster than the rate.
func TestWaitFIFO(t *testing.T) {
	t.Parallel()
	for _, rule := range []policy.Rule{
		{Name: "leaky", Limit: 50, Window: time.Second, Algorithm: policy.GCRA, Burst: 1},
		{Name: "bucket", Limit: 50, Window: time.Second, Algorithm: policy.TokenBucket, Burst: 2},
		{Name: "sliding", Limit: 50, Window: time.Second},
	} {
		t.Run(rule.Name, func(t *testing.T) {
			t.Parallel()
			waitInOrder(t, rule)
		})
	}
}

// waitInOrder is TestWaitFIFO for one rule.
func waitInOrder(t *testing.T, rule policy.Rule) {
	l := newWaitLimiter(t, sluice.Options{}, rule)
	ctx := context.Background()
	require.NoError(t, l.WaitN(ctx, rule.Name, "k", rule.MaxCost())) // empty the bucket: everyone queues
	const waiters = 100
	var rec admissions
	start := time.Now()
	wg := queueInOrder(t, l, waiters, func(i int) {
		assert.NoError(t, l.Wait(rec.ctx(ctx, i), rule.Name, "k"))
		rec.add(i)
	})
	wg.Wait()
	order := rec.order
	elapsed := time.Since(start)
	want := make([]int, waiters)
	for i := range want {
		want[i] = i
	}
	assert.Equal(t, want, order, "admitted in arrival order")
	// Never faster than the rate: 100 admissions after an empty bucket at
	// 50/s take at least 100 intervals of 20ms for the buckets, 1.8s for
	// the sliding window (its window can take 50 in one sub-window).
	assert.GreaterOrEqual(t, elapsed, 1790*time.Millisecond)
	t.Logf("%s: 100 waiters admitted in %v: %.1f/s", rule.Name, elapsed, float64(waiters)/elapsed.Seconds())
	assert.Zero(t, l.Stats().Waiters)
}

// TestWaitCancelHalf: of 100 waiters, the odd ones give up while queued:
// the even ones are still admitted in order, and nothing is left queued
// (TestMain checks that no goroutine is left either).
func TestWaitCancelHalf(t *testing.T) {
	t.Parallel()
	rule := policy.Rule{Name: "leaky", Limit: 50, Window: time.Second, Algorithm: policy.GCRA, Burst: 1}
	l := newWaitLimiter(t, sluice.Options{}, rule)
	d, err := l.Allow(context.Background(), "leaky", "k")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	const waiters = 100
	cancels := make([]context.CancelFunc, waiters)
	errs := make([]error, waiters)
	ctxs := make([]context.Context, waiters)
	for i := range ctxs {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
	}
	var rec admissions
	wg := queueInOrder(t, l, waiters, func(i int) {
		errs[i] = l.Wait(rec.ctx(ctxs[i], i), "leaky", "k")
		if errs[i] == nil {
			rec.add(i)
		}
	})
	for i := 1; i < waiters; i += 2 {
		cancels[i]()
	}
	wg.Wait()
	for i := range cancels {
		cancels[i]()
	}
	order := rec.order
	var evens []int
	for i := 0; i < waiters; i += 2 {
		evens = append(evens, i)
		assert.NoError(t, errs[i], "waiter %d", i)
	}
	// An odd waiter may have been admitted before its cancel arrived: the
	// ones admitted are in order, and every even one is among them.
	assert.IsIncreasing(t, order)
	assert.Subset(t, order, evens)
	for i := 1; i < waiters; i += 2 {
		if errs[i] != nil {
			assert.ErrorIs(t, errs[i], context.Canceled)
		}
	}
	assert.Zero(t, l.Stats().Waiters)
}

// TestWaitErrors: each way WaitN returns without admitting.
func TestWaitErrors(t *testing.T) {
	t.Parallel()
	l := newWaitLimiter(t, sluice.Options{MaxWaiters: 2},
		policy.Rule{Name: "slow", Limit: 1, Window: time.Hour},
		policy.Rule{Name: "api", Limit: 10, Window: time.Second},
	)
	ctx := context.Background()
	require.NoError(t, l.Wait(ctx, "slow", "k")) // admitted at once
	t.Run("deadline before the earliest admission", func(t *testing.T) {
		t.Parallel()
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		err := l.Wait(dctx, "slow", "k")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "earliest admission")
		assert.NoError(t, dctx.Err(), "returned at once, long before the deadline")
	})
	t.Run("bad input", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, l.Wait(ctx, "nope", "k"), sluice.ErrUnknownRule)
		require.ErrorIs(t, l.WaitN(ctx, "api", "k", 11), sluice.ErrInvalidCost)
		require.ErrorIs(t, l.WaitN(ctx, "api", "k", 0), sluice.ErrInvalidCost)
	})
	t.Run("too many waiters", func(t *testing.T) {
		t.Parallel()
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		base := l.Stats().Waiters
		d, err := l.Allow(ctx, "slow", "full") // the key's hour is used up: the next ones wait
		require.NoError(t, err)
		require.True(t, d.Allowed)
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				assert.ErrorIs(t, l.Wait(wctx, "slow", "full"), context.Canceled)
			}()
		}
		require.Eventually(t, func() bool { return l.Stats().Waiters >= base+2 }, 10*time.Second, time.Millisecond)
		err = l.Wait(ctx, "slow", "full")
		require.ErrorIs(t, err, sluice.ErrTooManyWaiters)
		assert.Contains(t, err.Error(), "MaxWaiters")
		cancel()
		wg.Wait()
	})
}

// TestWaitClose: Close wakes the waiters with ErrClosed.
func TestWaitClose(t *testing.T) {
	t.Parallel()
	l, err := sluice.New(sluice.Options{}, policy.Rule{Name: "slow", Limit: 1, Window: time.Hour})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, l.Wait(ctx, "slow", "k"))
	var got atomic.Value
	done := make(chan struct{})
	go func() {
		defer close(done)
		got.Store(l.Wait(ctx, "slow", "k"))
	}()
	require.Eventually(t, func() bool { return l.Stats().Waiters == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, l.Close())
	<-done
	err, _ = got.Load().(error)
	assert.True(t, errors.Is(err, sluice.ErrClosed), "got %v", err)
}
