package sluice_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// TestStrictAlgorithmsFleet: a fleet of three limiters on one Redis, each
// hammering the same keys from several goroutines under Strict TokenBucket,
// GCRA and SlidingLog rules, admits exactly what one exact central bucket
// (its Burst) or log (its Limit) admits within the test, and every denial
// carries the exact bucket's or log's fields: nothing left, a retry when
// one interval (the log: the window) has passed since the first
// admission, a reset when the bucket is full again (the newest unit has
// left the window).
func TestStrictAlgorithmsFleet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		rule policy.Rule
		want int64
	}{
		{policy.Rule{Name: "gcra", Limit: 20, Window: time.Hour, Algorithm: policy.GCRA, Mode: policy.Strict}, 20},
		{policy.Rule{Name: "tb", Limit: 20, Window: time.Hour, Algorithm: policy.TokenBucket, Burst: 5, Mode: policy.Strict}, 5},
		{policy.Rule{Name: "log", Limit: 20, Window: time.Hour, Algorithm: policy.SlidingLog, Mode: policy.Strict}, 20},
	} {
		t.Run(tc.rule.Name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			var ls []*sluice.Limiter
			for range 3 {
				l, err := sluice.New(sluice.Options{Redis: srv.Client(t), Prefix: "fleet-" + tc.rule.Name, Timeout: 5 * time.Second}, tc.rule)
				require.NoError(t, err)
				t.Cleanup(func() { _ = l.Close() })
				ls = append(ls, l)
			}
			keys := []string{"a", "b", "c"}
			var mu sync.Mutex
			admitted := map[string]int64{}
			var denials []sluice.Decision
			var wg sync.WaitGroup
			for _, l := range ls {
				for _, k := range keys {
					for range 4 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range 15 {
								d, err := l.Allow(context.Background(), tc.rule.Name, k)
								if !assert.NoError(t, err) {
									return
								}
								mu.Lock()
								if d.Allowed {
									admitted[k]++
								} else {
									denials = append(denials, d)
								}
								mu.Unlock()
							}
						}()
					}
				}
			}
			wg.Wait()
			took := time.Since(start)
			iv := tc.rule.Interval()
			full := time.Duration(tc.want) * iv // the bucket's tolerance
			retry := iv
			if tc.rule.Algorithm == policy.SlidingLog {
				full, retry = tc.rule.Window, tc.rule.Window
			}
			for _, k := range keys {
				assert.Equal(t, tc.want, admitted[k], "%s: exactly the central %v's admissions", k, tc.rule.Algorithm)
			}
			require.NotEmpty(t, denials)
			for _, d := range denials {
				require.Equal(t, tc.rule.Limit, d.Limit)
				require.Zero(t, d.Remaining)
				require.LessOrEqual(t, d.RetryAfter, retry)
				require.Greater(t, d.RetryAfter, retry-took)
				require.LessOrEqual(t, d.ResetAfter, full)
				require.Greater(t, d.ResetAfter, full-took)
			}
			for _, l := range ls {
				p, err := l.Peek(tc.rule.Name, "a")
				require.NoError(t, err)
				require.False(t, p.Allowed, "Peek asks the store")
				p, err = l.Peek(tc.rule.Name, "untouched")
				require.NoError(t, err)
				require.True(t, p.Allowed)
				require.Equal(t, tc.want, p.Remaining)
			}
		})
	}
}

// TestStrictAlgorithmsHungStore: while the store hangs, a Strict bucket's
// or log's check waits at most Timeout and is then decided by the failure
// mode: FailLocal denies with the sync interval as the retry hint (the
// store may still be deciding other instances' checks), FailClosed denies
// with ErrStoreUnavailable. Once the store answers again, checks are
// decided there.
func TestStrictAlgorithmsHungStore(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rules := []policy.Rule{
		{Name: "gcra", Limit: 20, Window: time.Hour, Algorithm: policy.GCRA, Mode: policy.Strict},
		{Name: "log", Limit: 20, Window: time.Hour, Algorithm: policy.SlidingLog, Mode: policy.Strict},
	}
	opts := sluice.Options{Redis: srv.Client(t), Timeout: 100 * time.Millisecond, SyncInterval: 250 * time.Millisecond}
	local, err := sluice.New(opts, rules...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = local.Close() })
	opts.FailureMode = policy.FailClosed
	opts.Prefix = "closed"
	closed, err := sluice.New(opts, rules...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = closed.Close() })
	ctx := context.Background()
	for _, r := range rules {
		for _, l := range []*sluice.Limiter{local, closed} {
			d, err := l.Allow(ctx, r.Name, "k")
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
	}
	srv.Pause()
	for _, r := range rules {
		d, err := local.Allow(ctx, r.Name, "k")
		require.NoError(t, err, r.Name)
		require.False(t, d.Allowed, r.Name)
		require.Equal(t, opts.SyncInterval, d.RetryAfter, r.Name)
		d, err = closed.Allow(ctx, r.Name, "k")
		require.ErrorIs(t, err, sluice.ErrStoreUnavailable, r.Name)
		require.False(t, d.Allowed, r.Name)
	}
	srv.Resume()
	for _, r := range rules {
		require.Eventually(t, func() bool {
			d, err := local.Allow(ctx, r.Name, "k")
			return err == nil && d.Allowed && d.Remaining < 19
		}, 10*time.Second, 20*time.Millisecond, "%s: decided by the store again, on the key's state there", r.Name)
	}
}

// TestStrictRetryAfterIsExact: a Strict GCRA denial's RetryAfter is at most
// one interval, and a retry after it is admitted. (That a retry before it
// is denied, to the nanosecond, is checked on the store's own times by the
// syncer's TestGCRAScriptMatchesReference.)
func TestStrictRetryAfterIsExact(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rule := policy.Rule{Name: "g", Limit: 5, Window: time.Second, Algorithm: policy.GCRA, Burst: 2, Mode: policy.Strict}
	l, err := sluice.New(sluice.Options{Redis: srv.Client(t), Timeout: 5 * time.Second}, rule)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	for i := range 3 {
		key := fmt.Sprint("k", i)
		d, err := l.AllowN(ctx, rule.Name, key, 2)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		d, err = l.Allow(ctx, rule.Name, key)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.LessOrEqual(t, d.RetryAfter, rule.Interval())
		time.Sleep(d.RetryAfter)
		e, err := l.Allow(ctx, rule.Name, key)
		require.NoError(t, err)
		require.True(t, e.Allowed, "at RetryAfter")
	}
}
