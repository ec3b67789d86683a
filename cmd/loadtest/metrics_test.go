package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
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
		mp, rd, err := ms.provider(i)
		require.NoError(t, err)
		l, err := sluice.New(sluice.Options{MeterProvider: mp}, policy.Rule{Name: "api", Limit: 2, Window: time.Hour})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		for range 3 + i {
			_, err := l.Allow(context.Background(), "api", "k")
			require.NoError(t, err)
		}
		// The load test reads the same counts through its own reader.
		assert.Equal(t, fleet.Paths{Local: int64(3 + i), Read: true}, fleet.ReadPaths(rd), "instance %d", i)
	}
	out := scrape(t, ms)
	assert.Contains(t, out, `sluice_checks_total{outcome="allowed",path="local",rule="api",service_instance_id="i0"} 2`)
	assert.Contains(t, out, `sluice_checks_total{outcome="denied",path="local",rule="api",service_instance_id="i0"} 1`)
	assert.Contains(t, out, `sluice_checks_total{outcome="denied",path="local",rule="api",service_instance_id="i1"} 2`)
	assert.Contains(t, out, `sluice_keys_tracked{service_instance_id="i1"} 1`)
}

// TestDashboardMetrics: every metric the Grafana dashboard queries is one
// the exporter serves for a limiter whose store went away (the accuracy
// histogram only once a pull found a key above its limit).
func TestDashboardMetrics(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ms, err := startMetrics("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ms.Close() })
	mp, _, err := ms.provider(0)
	require.NoError(t, err)
	l, err := sluice.New(sluice.Options{Redis: srv.Client(t), MeterProvider: mp, Timeout: 5 * time.Second},
		policy.Rule{Name: "api", Limit: 10, Window: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	for range 20 {
		_, err := l.Allow(ctx, "api", "k")
		require.NoError(t, err)
	}
	require.NoError(t, l.Flush(ctx))
	srv.Kill() // store errors are counted from the first one on
	require.Eventually(t, func() bool { return l.Stats().Degraded }, 10*time.Second, 10*time.Millisecond)
	served := scrape(t, ms)

	b, err := os.ReadFile("../../docs/grafana/sluice.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	names := regexp.MustCompile(`sluice_[a-z_]+`)
	seen := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range names.FindAllString(tg.Expr, -1) {
				if strings.HasPrefix(n, "sluice_accuracy_excess") {
					continue // recorded only for a key above its limit
				}
				seen++
				assert.Contains(t, served, "\n"+n+"{", "panel %q queries %s", p.Title, n)
			}
		}
	}
	assert.Greater(t, seen, 15)
}

// scrape returns ms's /metrics.
func scrape(t *testing.T, ms *metricsServer) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+ms.Addr()+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return "\n" + string(body)
}
