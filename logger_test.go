package sluice_test

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/policy"
)

// TestLoggerStoreUnreachable: a limiter whose store cannot be reached says
// so once through Options.Logger, with its failure mode and the cause, and
// never per check.
func TestLoggerStoreUnreachable(t *testing.T) {
	t.Parallel()
	// A loopback port with nothing listening: dials are refused at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	// One dial per attempt: go-redis dials five times, 100 ms apart, by default.
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })

	var buf logbuf.Buffer
	l, err := sluice.New(sluice.Options{
		Redis:        rdb,
		SyncInterval: 20 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(&buf, nil)),
	}, policy.Rule{Name: "api", Limit: 10, Window: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	for range 50 {
		_, _ = l.Allow(t.Context(), "api", "k")
	}
	time.Sleep(100 * time.Millisecond) // several failed sync cycles
	out := buf.String()
	require.Equal(t, 1, strings.Count(out, "store unreachable"), "logged once, not per cycle or check:\n%s", out)
	require.Contains(t, out, "failure_mode=fail-local")
	require.Contains(t, out, "connection refused")
	require.True(t, l.Stats().Degraded)
}
