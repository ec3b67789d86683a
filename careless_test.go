package sluice_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// TestNilContext: a nil context is context.Background on every entry point
// and every path, including the ones that wait for the store (a check at the
// cap, a Strict rule, Flush): never a panic.
func TestNilContext(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// A budget that gives no rule an unsynced unit (cap 0): every Eventual
	// check is an urgent sync. No reservation times out (and is denied) on
	// a loaded machine.
	l, err := sluice.New(sluice.Options{Redis: srv.Client(t), ErrorBudget: 0.001, SyncInterval: time.Hour, Timeout: 5 * time.Second},
		policy.Rule{Name: "eventual", Limit: 100, Window: time.Minute},
		policy.Rule{Name: "strict", Limit: 2, Window: time.Minute, Mode: policy.Strict},
		policy.Rule{Name: "local", Limit: 2, Window: time.Minute, Mode: policy.Local},
		policy.Rule{Name: "bucket", Limit: 2, Window: time.Minute, Algorithm: policy.GCRA},
	)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	var nilCtx context.Context //nolint:staticcheck // the point of the test
	for _, tc := range []struct {
		rule  string
		allow int
	}{{"eventual", 5}, {"strict", 2}, {"local", 2}, {"bucket", 2}} {
		got := 0
		for range 5 {
			d, err := l.Allow(nilCtx, tc.rule, "k")
			require.NoError(t, err, tc.rule)
			if d.Allowed {
				got++
			}
		}
		require.Equal(t, tc.allow, got, tc.rule)
		_, err := l.AllowN(nilCtx, tc.rule, "k", 1)
		require.NoError(t, err, tc.rule)
	}
	_, err = l.AllowAll(nilCtx, 1, sluice.Check{Rule: "eventual", Key: "all"}, sluice.Check{Rule: "bucket", Key: "all"})
	require.NoError(t, err, "AllowAll")
	require.NoError(t, l.Wait(nilCtx, "eventual", "wait"), "Wait")
	require.NoError(t, l.WaitN(nilCtx, "local", "wait", 1), "WaitN")
	require.NoError(t, l.Flush(nilCtx))
	require.Positive(t, l.Stats().Sync.Reservations, "the checks went to the store")
}

// FuzzOptions: New either refuses options with ErrInvalidOptions or returns
// a limiter that checks, peeks, flushes and closes without a panic.
func FuzzOptions(f *testing.F) {
	f.Add("sluice", int64(0), 0.0, int64(0), 0, 0, 0, 0, uint8(0), "", int64(1))
	f.Add("a{b}", int64(-1), math.NaN(), int64(1), -1, -1, -1, -1, uint8(9), "x:y", int64(0))
	f.Add("p", int64(time.Millisecond), 1e-300, int64(time.Nanosecond), 1, 1, math.MaxInt, 1, uint8(2), "id", int64(3))
	f.Fuzz(func(t *testing.T, prefix string, sync int64, budget float64, timeout int64,
		maxKeys, maxKeyLen, minInst, batch int, mode uint8, id string, cost int64) {
		opts := sluice.Options{
			Prefix:       prefix,
			SyncInterval: time.Duration(sync),
			ErrorBudget:  budget,
			InstanceID:   id,
			FailureMode:  policy.FailureMode(mode),
			Timeout:      time.Duration(timeout),
			MaxKeys:      maxKeys,
			MaxKeyLength: maxKeyLen,
			MinInstances: minInst,
			BatchSize:    batch,
		}
		l, err := sluice.New(opts, policy.Rule{Name: "api", Limit: 10, Window: time.Second})
		if err != nil {
			if !errors.Is(err, sluice.ErrInvalidOptions) {
				t.Fatalf("%+v: error %v does not wrap ErrInvalidOptions", opts, err)
			}
			return
		}
		defer l.Close()
		_, err = l.AllowN(context.Background(), "api", "key", cost)
		if err != nil && !errors.Is(err, sluice.ErrInvalidCost) && !errors.Is(err, sluice.ErrKeyTooLong) {
			t.Fatalf("%+v: AllowN: %v", opts, err)
		}
		if _, err := l.Peek("api", "key"); err != nil {
			t.Fatalf("%+v: Peek: %v", opts, err)
		}
		if err := l.Flush(context.Background()); err != nil {
			t.Fatalf("%+v: Flush: %v", opts, err)
		}
	})
}
