package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/report"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/store"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/traffic"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// TestParseFlagsOperations: the operations profiles run only when named,
// "ops" names all four, and they are refused where they cannot run.
func TestParseFlagsOperations(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	for _, p := range traffic.Operations {
		assert.NotContains(t, o.Profiles, p, "in the default run")
	}
	o, err = parseFlags([]string{"-profile", "steady,ops,shift"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, append([]string{traffic.Steady}, traffic.Operations...), o.Profiles)
	assert.Equal(t, 8, o.keysFor(traffic.Shift))
	assert.Equal(t, 4, o.keysFor(traffic.StoreLoss))
	cfg := fleetConfig(o, traffic.Shift, store.Target{}, "", "")
	assert.Equal(t, 1, cfg.Traffic.MaxCost)
	assert.InDelta(t, cfg.Traffic.OpRate(), cfg.Traffic.Rate, 1e-9, "the report's rate is the profile's own")
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-sim", "-profile", "shift"}, "-sim replays an algorithm"},
		{[]string{"-profile", "deploy", "-instances", "1"}, "-instances 2 or more"},
		{[]string{"-profile", "opz"}, "the operations profiles"},
	} {
		var stderr bytes.Buffer
		code := run(c.args, &bytes.Buffer{}, &stderr)
		assert.Equal(t, 2, code, "%v", c.args)
		assert.Contains(t, stderr.String(), c.msg, "%v", c.args)
	}
	var stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"-h"}, &bytes.Buffer{}, &stderr))
	for _, p := range traffic.Operations {
		assert.Contains(t, stderr.String(), "\n  "+p+" ", "-h lists %s", p)
	}
}

// TestRulesFile: the reload profile's file holds the aux rule and the load
// test's; its first part is a valid file without the load test's rule
// (what a reader sees in the middle of a rewrite); a rewrite in place
// leaves the whole file.
func TestRulesFile(t *testing.T) {
	t.Parallel()
	rule := policy.Rule{Name: "loadtest", Limit: 1000, Window: time.Second, Precision: 10, Mode: policy.Eventual}
	data, n, err := rulesText(rule, 100)
	require.NoError(t, err)
	full, err := policy.Load(bytes.NewReader(data))
	require.NoError(t, err)
	require.Len(t, full.Rules, 2)
	assert.Equal(t, auxRule(100), full.Rules[0])
	assert.Equal(t, rule, full.Rules[1])
	head, err := policy.Load(bytes.NewReader(data[:n]))
	require.NoError(t, err)
	assert.Equal(t, []policy.Rule{auxRule(100)}, head.Rules)
	changed, _, err := rulesText(rule, 200)
	require.NoError(t, err)
	assert.NotEqual(t, data, changed)

	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, changed, 0o600))
	require.NoError(t, rewriteInPlace(path, data, n, time.Millisecond))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, data, got)
}

// TestForeignAndFlush: the store-loss profile flushes only a Redis that
// holds nothing but the load test's keys.
func TestForeignAndFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	target, err := store.Parse(srv.Addr())
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, "lt:1:0:{x}", "1", 0).Err())
	k, err := target.Foreign(ctx, "lt:", 1000)
	require.NoError(t, err)
	assert.Empty(t, k)
	require.NoError(t, c.Set(ctx, "mine", "1", 0).Err())
	k, err = target.Foreign(ctx, "lt:", 1000)
	require.NoError(t, err)
	assert.Equal(t, "mine", k)
	require.NoError(t, c.Del(ctx, "mine").Err())
	db1 := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 1})
	t.Cleanup(func() { _ = db1.Close() })
	require.NoError(t, db1.Set(ctx, "other", "1", 0).Err())
	k, err = target.Foreign(ctx, "lt:", 1000)
	require.NoError(t, err)
	assert.Contains(t, k, "db1")

	require.NoError(t, flushAll(ctx, target))
	n, err := c.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n)

	// The run refuses store-loss on a Redis holding another's keys.
	require.NoError(t, c.Set(ctx, "mine", "1", 0).Err())
	var stderr bytes.Buffer
	code := run([]string{"-redis", srv.Addr(), "-profile", "store-loss", "-duration", "500ms", "-quiet"}, &bytes.Buffer{}, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), `it holds "mine"`)
	v, err := c.Get(ctx, "mine").Result()
	require.NoError(t, err)
	assert.Equal(t, "1", v, "not flushed")
}

// TestRunOperations runs the four operations profiles briefly against a
// real redis-server (about 6 s): each runs, records its checks, does what
// it says (replaces instances, rewrites the rules file, flushes the store)
// and has its verdict line, with the errors column. The figures, which
// depend on the library's handling of these operations, are not asserted.
func TestRunOperations(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run([]string{"-redis", srv.Addr(), "-profile", "ops", "-rule", "50/500ms", "-budget", "10%", "-timeout", "2s",
		"-duration", "1500ms", "-workers", "2", "-quiet", "-out", dir}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	out := stdout.String()
	require.Contains(t, out, "Verdict: what sluice promises")
	verdict := out[strings.LastIndex(out, "Verdict: what sluice promises"):]
	assert.Contains(t, verdict, report.PromiseNoErrors)
	lines := strings.Split(verdict, "\n")
	for _, p := range traffic.Operations {
		assert.True(t, slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, p+" ") }), "no verdict line for %s", p)
	}

	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	require.NoError(t, err)
	var r report.Run
	require.NoError(t, json.Unmarshal(b, &r))
	require.Len(t, r.Scenarios, len(traffic.Operations))
	for i, p := range traffic.Operations {
		s := &r.Scenarios[i]
		assert.Equal(t, p, s.Name)
		assert.True(t, s.Settings.Operation, p)
		assert.Positive(t, s.Accuracy.Checks, p)
		assert.Equal(t, s.Accuracy.Checks, s.Cost.Checks, "%s: every decision recorded", p)
		assert.Positive(t, s.Accuracy.Admitted, p)
		assert.Len(t, report.Verdict(s), 4, p)
		notes := strings.Join(s.Notes, "\n")
		assert.Contains(t, notes, "denied per key (pattern): k0 (", p)
		switch p {
		case traffic.Deploy:
			assert.Contains(t, notes, "deploy: 4 of 4 instances replaced")
		case traffic.Reload:
			assert.Contains(t, notes, "rewritten in place")
			assert.NotContains(t, notes, "rewriting the rules file:")
		case traffic.StoreLoss:
			assert.Contains(t, notes, "store-loss: FLUSHALL at")
		}
	}
}
