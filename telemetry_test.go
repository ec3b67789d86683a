package sluice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/policy"
)

// TestErrKind: store errors are classified by kind, also wrapped.
func TestErrKind(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	reply := srv.Client(t).Do(context.Background(), "NOSUCHCOMMAND").Err()
	require.Error(t, reply)
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"deadline", context.DeadlineExceeded, "timeout"},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, "timeout"},
		{"refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, "connection"},
		{"eof", io.EOF, "connection"},
		{"redis reply", reply, "reply"},
		{"wrapped reply", fmt.Errorf("syncer: push: %w", reply), "reply"},
		{"other", errors.New("unexpected reply of 2 values"), "other"},
		{"store config", fmt.Errorf("%w: grant it ~sluice:*: %w", ErrStoreConfig, reply), "config"},
		{"writes refused", fmt.Errorf("syncer: push: %w: %w", syncport.ErrWritesRefused, reply), "refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, c.want, errKindNames[errKind(c.err)])
		})
	}
}

// TestUnsetGlobal: the global MeterProvider's stand-in (no test of this
// package sets a global provider) is told from a provider set explicitly.
func TestUnsetGlobal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		mp   metric.MeterProvider
		want bool
	}{
		{"global stand-in", otel.GetMeterProvider(), true},
		{"no-op", metricnoop.NewMeterProvider(), false},
		{"none", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, c.want, unsetGlobal(c.mp))
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestInFlightTelemetryOff: with the no-op MeterProvider an InFlight rule
// keeps no counts (Acquire touches nothing of the metrics); with a real
// one it counts; either way a Local rule's Acquire and Release allocate
// nothing. Not parallel: AllocsPerRun counts every goroutine's allocations.
func TestInFlightTelemetryOff(t *testing.T) {
	for _, c := range []struct {
		name    string
		mp      metric.MeterProvider
		counted bool
	}{
		{"no-op", metricnoop.NewMeterProvider(), false},
		{"global stand-in", otel.GetMeterProvider(), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := New(Options{MeterProvider: c.mp}, policy.Rule{Name: "jobs", Limit: 4, InFlight: true, Mode: policy.Local})
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			r := l.inf.rule("jobs")
			require.NotNil(t, r)
			assert.Equal(t, c.counted, r.counts != nil)
			ctx := context.Background()
			allocs := testing.AllocsPerRun(1000, func() {
				s, _, _ := l.Acquire(ctx, "jobs", "k")
				s.Release()
			})
			assert.Zero(t, allocs)
		})
	}
}
