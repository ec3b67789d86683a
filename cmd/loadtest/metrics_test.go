package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// TestMetricsFlag: -metrics takes a loopback host:port only, and not with
// -procs or -sim.
func TestMetricsFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		msg  string // "" = accepted
	}{
		{[]string{"-metrics", "127.0.0.1:9464"}, ""},
		{[]string{"-metrics", "[::1]:9464"}, ""},
		{[]string{"-metrics", "localhost:9464"}, ""},
		{[]string{"-metrics", "0.0.0.0:9464"}, "loopback only"},
		{[]string{"-metrics", "example.com:9464"}, "loopback only"},
		{[]string{"-metrics", "9464"}, "host:port"},
		{[]string{"-metrics", "127.0.0.1:http"}, "not a number"},
		{[]string{"-metrics", "127.0.0.1:9464", "-procs"}, "-procs"},
		{[]string{"-metrics", "127.0.0.1:9464", "-sim"}, "no meaning with -sim"},
	} {
		_, err := parseFlags(c.args, &bytes.Buffer{})
		if c.msg == "" {
			assert.NoError(t, err, "%v", c.args)
		} else if assert.Error(t, err, "%v", c.args) {
			assert.Contains(t, err.Error(), c.msg, "%v", c.args)
		}
	}
}

// TestMetricsServer: a limiter on an instance's MeterProvider shows on
// /metrics through the Prometheus exporter, labelled with its instance.
func TestMetricsServer(t *testing.T) {
	t.Parallel()
	ms, err := startMetrics("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ms.Close() })
	for i := range 2 {
		mp, err := ms.provider(i)
		require.NoError(t, err)
		l, err := sluice.New(sluice.Options{MeterProvider: mp}, policy.Rule{Name: "api", Limit: 2, Window: time.Hour})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		for range 3 + i {
			_, err := l.Allow(context.Background(), "api", "k")
			require.NoError(t, err)
		}
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+ms.Addr()+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := string(body)
	assert.Contains(t, out, `sluice_checks_total{outcome="allowed",path="local",rule="api",service_instance_id="i0"} 2`)
	assert.Contains(t, out, `sluice_checks_total{outcome="denied",path="local",rule="api",service_instance_id="i0"} 1`)
	assert.Contains(t, out, `sluice_checks_total{outcome="denied",path="local",rule="api",service_instance_id="i1"} 2`)
	assert.Contains(t, out, `sluice_keys_tracked{service_instance_id="i1"} 1`)
}
