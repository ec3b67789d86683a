package sluice_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// use admits n units of key under rule, one by one, and fails on a denial.
func use(t *testing.T, l *sluice.Limiter, rule, key string, n int) {
	t.Helper()
	for range n {
		d, err := l.Allow(context.Background(), rule, key)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
}

func remaining(t *testing.T, l *sluice.Limiter, rule, key string) int64 {
	t.Helper()
	d, err := l.Peek(rule, key)
	require.NoError(t, err)
	return d.Remaining
}

func TestSetRules(t *testing.T) {
	t.Parallel()
	api := policy.Rule{Name: "api", Limit: 5, Window: time.Minute}
	bucket := policy.Rule{Name: "b", Limit: 5, Window: time.Minute, Algorithm: policy.GCRA}
	tests := []struct {
		name    string
		next    []policy.Rule
		err     string
		remain  int64 // api's remaining for key k after the change (used 3 of 5)
		bRemain int64 // b's remaining for key k (used 3 of 5)
	}{
		{"unchanged keeps counts", []policy.Rule{api, bucket}, "", 2, 2},
		{"higher limit applies at once, counts kept", []policy.Rule{with(api, func(r *policy.Rule) { r.Limit = 10 }), bucket}, "", 7, 2},
		{"lower limit applies at once", []policy.Rule{with(api, func(r *policy.Rule) { r.Limit = 3 }), bucket}, "", 0, 2},
		{"window changed restarts counts", []policy.Rule{with(api, func(r *policy.Rule) { r.Window = 2 * time.Minute }), bucket}, "", 5, 2},
		{"algorithm changed restarts counts", []policy.Rule{with(api, func(r *policy.Rule) { r.Algorithm = policy.FixedWindow }), bucket}, "", 5, 2},
		{"bucket limit changed restarts its counts", []policy.Rule{api, with(bucket, func(r *policy.Rule) { r.Limit = 6 })}, "", 2, 6},
		{"invalid set changes nothing", []policy.Rule{with(api, func(r *policy.Rule) { r.Limit = 50 }), {Name: "bad", Limit: 0, Window: time.Second}}, "Limit 0 is out of range", 2, 2},
		{"duplicate names change nothing", []policy.Rule{api, api}, "duplicate rule name", 2, 2},
		{"empty set changes nothing", nil, "no rules", 2, 2},
		{"shared rule without a store", []policy.Rule{with(api, func(r *policy.Rule) { r.Mode = policy.Eventual }), bucket}, "needs a store", 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := sluice.New(sluice.Options{}, api, bucket)
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			use(t, l, "api", "k", 3)
			use(t, l, "b", "k", 3)
			err = l.SetRules(tt.next...)
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.remain, remaining(t, l, "api", "k"), "api")
			assert.Equal(t, tt.bRemain, remaining(t, l, "b", "k"), "b")
		})
	}
}

func with(r policy.Rule, f func(*policy.Rule)) policy.Rule {
	f(&r)
	return r
}

func TestSetRulesRemoveAndAdd(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	l, err := sluice.New(sluice.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		policy.Rule{Name: "a", Limit: 5, Window: time.Minute}, policy.Rule{Name: "b", Limit: 5, Window: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	require.NoError(t, l.SetRules(policy.Rule{Name: "a", Limit: 6, Window: time.Minute}, policy.Rule{Name: "c", Limit: 1, Window: time.Second}))
	_, err = l.Allow(context.Background(), "b", "k")
	assert.ErrorIs(t, err, sluice.ErrUnknownRule)
	use(t, l, "c", "k", 1)
	d, err := l.Allow(context.Background(), "c", "k")
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Contains(t, logs.String(), "rules replaced")
	assert.Contains(t, logs.String(), "added=[c]")
	assert.Contains(t, logs.String(), "removed=[b]")
	assert.Contains(t, logs.String(), "a (limit 5 -> 6)")

	require.NoError(t, l.Close())
	assert.ErrorIs(t, l.SetRules(policy.Rule{Name: "a", Limit: 6, Window: time.Minute}), sluice.ErrClosed)
}

// TestOverrides: keys named by a rule's overrides get their tier's limit,
// each counted apart; other keys the rule's.
func TestOverrides(t *testing.T) {
	t.Parallel()
	rule := policy.Rule{Name: "api", Limit: 2, Window: time.Minute, Overrides: []policy.Override{
		{Tier: "pro", Limit: 4, Keys: []string{"acme", "globex"}},
		{Tier: "internal", Unlimited: true, Keys: []string{"billing"}},
		{Tier: "banned", Deny: true, Keys: []string{"mallory"}},
	}}
	l, err := sluice.New(sluice.Options{}, rule)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	count := func(key string) (admitted int, last sluice.Decision) {
		for range 10 {
			d, err := l.Allow(context.Background(), "api", key)
			require.NoError(t, err)
			if d.Allowed {
				admitted++
			}
			last = d
		}
		return admitted, last
	}
	tests := []struct {
		key   string
		want  int
		limit int64
	}{
		{"someone", 2, 2},
		{"acme", 4, 4},
		{"globex", 4, 4}, // apart from acme
		{"billing", 10, 0},
		{"mallory", 0, 0},
	}
	for _, tt := range tests {
		got, d := count(tt.key)
		assert.Equal(t, tt.want, got, tt.key)
		assert.Equal(t, tt.limit, d.Limit, tt.key)
	}
	d, err := l.Peek("api", "mallory")
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, time.Minute, d.RetryAfter)

	// A tier's counts survive a reload that keeps its geometry; a key
	// moved to another tier starts there.
	rule.Overrides[0].Limit = 5
	rule.Overrides[0].Keys = []string{"acme"}
	require.NoError(t, l.SetRules(rule))
	assert.Equal(t, int64(1), remaining(t, l, "api", "acme"))
	assert.Equal(t, int64(2), remaining(t, l, "api", "globex"), "globex is back on the rule's limit, where it used nothing")
}

func TestOverrideKeyTooLong(t *testing.T) {
	t.Parallel()
	_, err := sluice.New(sluice.Options{MaxKeyLength: 4}, policy.Rule{Name: "api", Limit: 2, Window: time.Minute,
		Overrides: []policy.Override{{Tier: "pro", Limit: 4, Keys: []string{"toolong"}}}})
	require.ErrorIs(t, err, policy.ErrInvalidRule)
	assert.Contains(t, err.Error(), "MaxKeyLength")
}

// TestDenyRule: envoy's requests_per_unit 0.
func TestDenyRule(t *testing.T) {
	t.Parallel()
	l, err := sluice.New(sluice.Options{}, policy.Rule{Name: "off", Window: time.Minute, Deny: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	d, err := l.AllowN(context.Background(), "off", "k", 1000)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, time.Minute, d.RetryAfter)
}

// TestSetRulesUnderLoad: goroutines check while SetRules swaps sets (a
// rule added and removed, another retuned); the rule that never changes
// admits exactly its limit, and the retuned one never more than its
// highest limit. Run with -race.
func TestSetRulesUnderLoad(t *testing.T) {
	t.Parallel()
	steady := policy.Rule{Name: "steady", Limit: 3000, Window: time.Hour}
	tuned := policy.Rule{Name: "tuned", Limit: 1000, Window: time.Hour}
	extra := policy.Rule{Name: "extra", Limit: 10, Window: time.Second}
	l, err := sluice.New(sluice.Options{}, steady, tuned)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	var admitted, tunedAdmitted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				d, err := l.Allow(context.Background(), "steady", "k")
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
				d, err = l.Allow(context.Background(), "tuned", "k")
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					tunedAdmitted.Add(1)
				}
				if _, err := l.Allow(context.Background(), "extra", "k"); err != nil {
					assert.ErrorIs(t, err, sluice.ErrUnknownRule)
				}
			}
		}()
	}
	for i := range 200 {
		t2 := tuned
		t2.Limit = 1000 + int64(i%2)*500
		if i%2 == 0 {
			require.NoError(t, l.SetRules(steady, t2, extra))
		} else {
			require.NoError(t, l.SetRules(steady, t2))
		}
	}
	for admitted.Load() < steady.Limit {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	assert.Equal(t, steady.Limit, admitted.Load(), "the unchanged rule admits exactly its limit")
	assert.LessOrEqual(t, tunedAdmitted.Load(), int64(1500))
	assert.GreaterOrEqual(t, tunedAdmitted.Load(), int64(1000))
}

func TestWatchFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write := func(s string) {
		tmp := filepath.Join(dir, "tmp")
		require.NoError(t, os.WriteFile(tmp, []byte(s), 0o600))
		require.NoError(t, os.Rename(tmp, path)) // as editors and ConfigMaps do
	}
	write("rules:\n  - {name: api, limit: 5, window: 1m}\n")
	var logs logbuf.Buffer
	l, loaded := watching(t, path, slog.New(slog.NewTextHandler(&logs, nil)), 0)
	<-loaded
	use(t, l, "api", "k", 3)

	write("rules:\n  - {name: api, limit: 5, window: oops}\n")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "configuration not applied") }, 10*time.Second, 5*time.Millisecond)
	assert.Contains(t, logs.String(), "rules.yaml:2:")
	assert.Equal(t, int64(2), remaining(t, l, "api", "k"), "a bad file keeps the rules")

	write("rules:\n  - {name: api, limit: 8, window: 1m}\n  - {name: new, limit: 1, window: 1m}\n")
	c := <-loaded
	assert.Len(t, c.Rules, 2)
	assert.Equal(t, int64(5), remaining(t, l, "api", "k"), "the new limit, the old counts")
	use(t, l, "new", "k", 1)

	_, err := os.Stat(path)
	require.NoError(t, err)
	assert.Error(t, l.WatchFile(t.Context(), filepath.Join(dir, "missing.yaml"), sluice.WatchOptions{}))
}

// TestSetRulesShared: with a store, an Eventual rule keeps its counts in
// Redis across SetRules, and a rule whose geometry changed is retired from
// the sync (its name reused by the new one).
func TestSetRulesShared(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	api := policy.Rule{Name: "api", Limit: 100, Window: time.Minute}
	l, err := sluice.New(sluice.Options{Redis: client, Timeout: 2 * time.Second}, api) // -race on a busy machine: no check times out
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	use(t, l, "api", "k", 30)
	api.Limit = 200
	require.NoError(t, l.SetRules(api))
	require.NoError(t, l.Flush(context.Background()))
	assert.Equal(t, int64(170), remaining(t, l, "api", "k"))

	api.Window = 2 * time.Minute
	require.NoError(t, l.SetRules(api))
	use(t, l, "api", "k", 7)
	require.NoError(t, l.Flush(context.Background()))
	assert.Equal(t, int64(193), remaining(t, l, "api", "k"), "a new geometry counts apart")
}

// TestSetRulesElastic: an elastic rule is linked to its capacity rule in
// the new set; a set whose capacity rule is missing is refused whole.
func TestSetRulesElastic(t *testing.T) {
	t.Parallel()
	service := policy.Rule{Name: "service", Limit: 1000, Window: time.Minute}
	tenant := policy.Rule{Name: "tenant", Limit: 2, Window: time.Minute, Ceiling: 4, Capacity: "service"}
	l, err := sluice.New(sluice.Options{}, service, tenant)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	require.NoError(t, l.SetRules(service, tenant))
	use(t, l, "tenant", "k", 4) // past its limit, within the ceiling, while the service has room
	err = l.SetRules(tenant)
	require.ErrorIs(t, err, policy.ErrInvalidRule)
	assert.Contains(t, err.Error(), "Capacity")
	d, err := l.Allow(context.Background(), "tenant", "k")
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the refused set changed nothing: the ceiling is reached")
}
