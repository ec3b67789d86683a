package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

func TestBucketCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    map[string]string
		want map[int64]int64
	}{
		{"empty", map[string]string{}, map[int64]int64{}},
		{"buckets", map[string]string{"100": "3", "101": "4"}, map[int64]int64{100: 3, 101: 4}},
		{"restored adds to its bucket", map[string]string{"100": "3", "v100": "5", "v99": "1"}, map[int64]int64{100: 8, 99: 1}},
		{"bookkeeping is skipped", map[string]string{"i:host-1": "17", "r12:host-1": "12:1:100:0:0", "100": "2"}, map[int64]int64{100: 2}},
		{"a negative correction", map[string]string{"100": "-1", "v100": "3"}, map[int64]int64{100: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, bucketCounts(tc.h))
		})
	}
}

// inspectJSON runs `sluice inspect -json args...` and decodes its report.
func inspectJSON(t *testing.T, args ...string) report {
	t.Helper()
	code, out, errOut := runCLI(append([]string{"inspect", "-json"}, args...)...)
	require.Equal(t, exitOK, code, "%s%s", out, errOut)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	return rep
}

// TestInspectFleetCount: a fleet of limiters admits N of a key, past its
// limit; inspect reads the fleet's count from the store within the error
// budget ε·L of N, and the registry's live instances.
func TestInspectFleetCount(t *testing.T) {
	t.Parallel()
	const (
		limit   = 400
		budget  = 0.05
		fleet   = 3
		callers = 4 // per limiter
		tries   = 2 * limit / (fleet * callers)
		prefix  = "insp"
	)
	rdb := redistest.Start(t)
	cfg := writeFile(t, "rules.yaml", fmt.Sprintf("rules:\n  - name: api\n    limit: %d\n    window: 1h\n  - name: mine\n    limit: 5\n    window: 1m\n    mode: local\n", limit))
	loaded, err := policy.LoadFile(cfg)
	require.NoError(t, err)
	ls := make([]*sluice.Limiter, fleet)
	for i := range ls {
		l, err := sluice.New(sluice.Options{
			Redis: rdb.Client(t), Prefix: prefix, ErrorBudget: budget,
			SyncInterval: 10 * time.Millisecond, InstanceID: fmt.Sprintf("node-%d", i),
		}, loaded.Rules...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		ls[i] = l
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	for _, l := range ls {
		for range callers {
			wg.Go(func() {
				for range tries {
					d, err := l.Allow(ctx, "api", "alice@example.com")
					if err == nil && d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	n := admitted.Load()
	require.Greater(t, n, int64(limit*9/10), "the fleet admitted about its limit")
	// While the instances still hold counts they have not pushed, the
	// store trails them by at most the error budget.
	early := inspectJSON(t, "-config", cfg, "-redis", rdb.Addr(), "-prefix", prefix, "api", "alice@example.com")
	require.NotNil(t, early.Key)
	t.Logf("admitted %d; inspect before the flush: %d", n, early.Key.Count)
	assert.InDelta(t, n, early.Key.Count, budget*limit, "inspect's fleet count, before the flush, against the %d admitted", n)
	for _, l := range ls {
		require.NoError(t, l.Flush(ctx))
	}

	rep := inspectJSON(t, "-config", cfg, "-redis", rdb.Addr(), "-prefix", prefix, "api", "alice@example.com")
	require.NotNil(t, rep.Store)
	assert.True(t, rep.Store.OK, rep.Store.Error)
	assert.Positive(t, rep.Store.PingMaxMs)
	assert.WithinDuration(t, time.Now(), rep.Store.Time, time.Minute)
	ids := []string{}
	for _, in := range rep.Instances {
		ids = append(ids, in.ID)
		assert.Positive(t, in.ExpiresInSeconds)
	}
	assert.ElementsMatch(t, []string{"node-0", "node-1", "node-2"}, ids)
	require.NotNil(t, rep.Key)
	k := rep.Key
	assert.Empty(t, k.Note)
	assert.Equal(t, "api", k.Rule)
	assert.Equal(t, "insp:{api:alice@example.com}:360000000", k.RedisKey)
	assert.InDelta(t, n, k.Count, budget*limit, "inspect's fleet count against the %d admitted", n)
	assert.Equal(t, max(limit-k.Count, 0), k.Remaining)
	assert.Positive(t, k.ResetAfterSeconds)
	assert.LessOrEqual(t, k.ResetAfterSeconds, (time.Hour + 6*time.Minute).Seconds())
	require.Len(t, rep.Files, 1)
	require.Len(t, rep.Files[0].Rules, 2)
	assert.Equal(t, "eventual", rep.Files[0].Rules[0].Mode)
	assert.Equal(t, "local", rep.Files[0].Rules[1].Mode)
	assert.Contains(t, rep.Files[0].Rules[1].StoreNote, "local rule")

	// The same in text.
	code, out, errOut := runCLI("inspect", "-config", cfg, "-redis", rdb.Addr(), "-prefix", prefix, "api", "alice@example.com")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, cfg+": sluice configuration, 2 rules\n")
	assert.Regexp(t, `\n  api +sliding +eventual +400 per 1h0m0s +precision 10\n`, out)
	assert.Contains(t, out, `prefix "insp": ok, PING `)
	assert.Contains(t, out, "instances: 3 live\n  node-")
	assert.Contains(t, out, fmt.Sprintf(`key "alice@example.com" of rule api: fleet count %d of 400, remaining %d, resets in `, k.Count, k.Remaining))

	// A local rule's key, and a key nobody counted.
	rep = inspectJSON(t, "-config", cfg, "-redis", rdb.Addr(), "-prefix", prefix, "mine", "x")
	assert.Contains(t, rep.Key.Note, "local rule")
	rep = inspectJSON(t, "-config", cfg, "-redis", rdb.Addr(), "-prefix", prefix, "api", "nobody")
	assert.Zero(t, rep.Key.Count)
	assert.Equal(t, int64(limit), rep.Key.Remaining)
	assert.Zero(t, rep.Key.ResetAfterSeconds)
	assert.Empty(t, rep.Key.Buckets)
	// Another prefix is another fleet.
	rep = inspectJSON(t, "-config", cfg, "-redis", rdb.Addr(), "-prefix", "other", "api", "alice@example.com")
	assert.Empty(t, rep.Instances)
	assert.Zero(t, rep.Key.Count)
}

// TestInspectEnvoy: a descriptor of an envoy file, counted through
// `sluice check`, read back by inspect; the usage errors.
func TestInspectEnvoy(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t)
	cfg := writeFile(t, "rl.yaml", envoyConfig)
	for range 2 {
		code, out, errOut := runCLI("check", "-config", cfg, "-redis", rdb.Addr(), "-prefix", "env", "path=/login")
		require.Equal(t, exitOK, code, out+errOut)
	}
	rep := inspectJSON(t, "-config", cfg, "-redis", rdb.Addr(), "-prefix", "env", "path=/login")
	require.NotNil(t, rep.Key)
	assert.Contains(t, rep.Key.Rule, "test.path")
	assert.Equal(t, int64(2), rep.Key.Count, "a fixed window counts exactly what was pushed")
	assert.Zero(t, rep.Key.Remaining)
	assert.Positive(t, rep.Key.ResetAfterSeconds)
	assert.LessOrEqual(t, rep.Key.ResetAfterSeconds, (2 * time.Hour).Seconds())
	assert.Empty(t, rep.Instances, "check's limiters left the registry when they closed")
	assert.Equal(t, "envoy", rep.Files[0].Format)
	assert.Equal(t, "test", rep.Files[0].Domain)

	rep = inspectJSON(t, "-config", cfg, "-redis", rdb.Addr(), "-prefix", "env", "tenant=x")
	assert.Contains(t, rep.Key.Note, "no limit applies")

	// Without a store: the rules only.
	code, out, _ := runCLI("inspect", "-config", cfg)
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, `envoy configuration, domain "test", 2 rules`)
	assert.NotContains(t, out, "store")

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"inspect"}, exitUsage, "-config FILE is required"},
		{[]string{"inspect", "-config", cfg, "user=a"}, exitUsage, "give -redis"},
		{[]string{"inspect", "-config", cfg, "-redis", rdb.Addr(), "nope", "k"}, exitError, `no rule named "nope"`},
		{[]string{"inspect", "-config", cfg, "-redis", rdb.Addr(), "a", "b", "c"}, exitUsage, "RULE KEY"},
		{[]string{"inspect", "-config", cfg + ".missing"}, exitError, "no such file"},
	} {
		code, _, errOut := runCLI(tc.args...)
		assert.Equal(t, tc.code, code, "%q", tc.args)
		assert.Contains(t, errOut, tc.msg, "%q", tc.args)
	}

	// A store that does not answer: the report says so, exit status 1.
	code, out, _ = runCLI("inspect", "-config", cfg, "-redis", "127.0.0.1:1")
	assert.Equal(t, exitError, code)
	assert.Contains(t, out, "unavailable")
}

// TestInspectInFlight: a key of an in-flight rule shows the slots the fleet
// holds in the store (leases not expired), and a local in-flight rule says
// the store holds none.
func TestInspectInFlight(t *testing.T) {
	t.Parallel()
	const prefix = "inf"
	rdb := redistest.Start(t)
	cfg := writeFile(t, "rules.yaml", "rules:\n  - name: reports\n    limit: 5\n    in_flight: true\n  - name: mine\n    limit: 5\n    in_flight: true\n    mode: local\n")
	loaded, err := policy.LoadFile(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	var slots []sluice.Slot
	for i := range 2 {
		l, err := sluice.New(sluice.Options{Redis: rdb.Client(t), Prefix: prefix, InstanceID: fmt.Sprintf("node-%d", i)}, loaded.Rules...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		for range 2 {
			s, d, err := l.Acquire(ctx, "reports", "alice")
			require.NoError(t, err)
			require.True(t, d.Allowed)
			slots = append(slots, s)
		}
	}
	rep := inspectJSON(t, "-config", cfg, "-redis", rdb.Addr(), "-prefix", prefix, "reports", "alice")
	require.NotNil(t, rep.Key)
	assert.True(t, rep.Key.InFlight)
	assert.Equal(t, int64(4), rep.Key.Count, "four slots held across two instances")
	assert.Equal(t, int64(1), rep.Key.Remaining)
	assert.Equal(t, "in-flight", rep.Files[0].Rules[0].Algorithm)
	slots[0].Release()
	rep = inspectJSON(t, "-config", cfg, "-redis", rdb.Addr(), "-prefix", prefix, "reports", "alice")
	assert.Equal(t, int64(3), rep.Key.Count, "a released slot leaves the store")

	code, out, errOut := runCLI("inspect", "-config", cfg, "-redis", rdb.Addr(), "-prefix", prefix, "reports", "alice")
	require.Equal(t, exitOK, code, errOut)
	assert.Regexp(t, `\n  reports +in-flight +strict +5 in flight\n`, out)
	assert.Contains(t, out, `key "alice" of rule reports: 3 in flight across the fleet of 5, remaining 2`)
	rep = inspectJSON(t, "-config", cfg, "-redis", rdb.Addr(), "-prefix", prefix, "mine", "alice")
	assert.Contains(t, rep.Key.Note, "local in-flight rule")
}
