package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/vclock"
)

// domainConfig is an envoy file of domain whose "user" limit is limit per
// minute.
func domainConfig(domain, limit string) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: " + limit + "\n"
}

// writeTree writes files (path relative to dir: content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	}
}

// swapLink points link at target atomically (a new link renamed over it),
// as a deployment swaps envoyproxy/ratelimit's RUNTIME_ROOT.
func swapLink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".new"
	require.NoError(t, os.Symlink(target, tmp))
	require.NoError(t, os.Rename(tmp, link))
}

func limitOf(t *testing.T, c rlspb.RateLimitServiceClient, domain, user string) uint32 {
	t.Helper()
	resp := call(t, c, &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*extrl.RateLimitDescriptor{desc("user", user)}})
	return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()
}

// TestServeRuntime: envoyproxy/ratelimit's layout, from its environment
// variables: every file of RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
// RUNTIME_APPDIRECTORY, one domain each, applied again when a file
// changes in place and when the root's link is swapped. The limiter's
// clock stands still: an envoy limit is a fixed window aligned on its
// unit, and the seconds the reloads take must not cross a minute's end,
// where u1's counts lapse (TestRuntimeReloadKeepsCounts steps through it).
func TestServeRuntime(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	writeTree(t, base, map[string]string{
		"v1/ratelimit/config/a.yaml":          domainConfig("a", "3"),
		"v1/ratelimit/config/b.yml":           domainConfig("b", "4"),
		"v1/ratelimit/config/.broken.yaml":    "domain: [", // skipped: RUNTIME_IGNOREDOTFILES
		"v1/ratelimit/config/notes.txt":       "not a configuration",
		"v1/ratelimit/other/c.yaml":           domainConfig("c", "5"), // another app directory
		"v2/ratelimit/config/a.yaml":          domainConfig("a", "9"),
		"v2/ratelimit/config/sluice-fmt.yaml": "rules:\n  - name: api\n    limit: 2\n    window: 1m\n",
	})
	root := filepath.Join(base, "current")
	require.NoError(t, os.Symlink(filepath.Join(base, "v1"), root))
	clock := &vclock.Clock{}
	clock.NS.Store(time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC).UnixNano())
	s := startServeClock(t, map[string]string{
		"RUNTIME_ROOT":           root,
		"RUNTIME_SUBDIRECTORY":   "ratelimit",
		"RUNTIME_IGNOREDOTFILES": "true",
	}, clock)
	c := client(t, s.addr)
	assert.Equal(t, uint32(3), limitOf(t, c, "a", "u1"))
	assert.Equal(t, uint32(4), limitOf(t, c, "b", "u1"))
	assert.Zero(t, limitOf(t, c, "c", "u1"), "a file of another app directory is not read")
	resp := call(t, c, &rlspb.RateLimitRequest{Domain: "a", Descriptors: []*extrl.RateLimitDescriptor{desc("user", "u1")}})
	assert.Equal(t, uint32(1), resp.Statuses[0].LimitRemaining, "domain a counted u1 twice")

	// In place: a file rewritten.
	writeTree(t, base, map[string]string{"v1/ratelimit/config/b.yml": domainConfig("b", "6")})
	require.Eventually(t, func() bool { return limitOf(t, c, "b", "u2") == 6 }, 30*time.Second, 100*time.Millisecond, "b.yml rewritten")
	assert.Equal(t, uint32(3), limitOf(t, c, "a", "u2"))

	// The root's link swapped: the new tree's files, b gone, a sluice
	// file answering every other domain.
	swapLink(t, filepath.Join(base, "v2"), root)
	require.Eventually(t, func() bool { return limitOf(t, c, "a", "u3") == 9 }, 30*time.Second, 100*time.Millisecond, "the link swapped")
	assert.Zero(t, limitOf(t, c, "b", "u3"), "b.yml is gone")
	resp = call(t, c, &rlspb.RateLimitRequest{Domain: "b", Descriptors: []*extrl.RateLimitDescriptor{desc("api", "k")}})
	assert.Equal(t, uint32(2), resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(), "the sluice file's rule")
	resp = call(t, c, &rlspb.RateLimitRequest{Domain: "a", Descriptors: []*extrl.RateLimitDescriptor{desc("user", "u1")}})
	assert.Equal(t, uint32(6), resp.Statuses[0].LimitRemaining, "u1 keeps its 3 counts under the new limit 9")

	// A change that does not load keeps the rules in force.
	writeTree(t, base, map[string]string{"v2/ratelimit/config/dup.yaml": domainConfig("a", "1")})
	require.Eventually(t, func() bool { return strings.Contains(s.stderr.String(), "configuration not applied") }, 30*time.Second, 100*time.Millisecond)
	assert.Contains(t, s.stderr.String(), `domain \"a\" is also`)
	assert.Equal(t, uint32(9), limitOf(t, c, "a", "u4"))
}

// TestRuntimeReloadKeepsCounts steps the watcher through the ways a
// swap of the root's link can be seen, one poll at a time on a virtual
// clock: u1 counted twice under v1 (domain a's limit 3) has the same 2
// counts under v2's limit 9, whatever the watcher saw on the way, until
// the minute ends: an envoy limit is a fixed window aligned on its unit.
func TestRuntimeReloadKeepsCounts(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC)
	type step struct {
		tree    string        // the link's target
		polls   int           // the watcher's polls after the swap
		advance time.Duration // the clock's move after them
		limit   uint32        // domain a's limit then; 0: no limit
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  uint32 // u1's LimitRemaining after one more check
	}{
		{"swapped, seen once then settled", []step{{"v2", 1, 0, 3}, {"v2", 1, 0, 9}}, 6},
		{"a tree without a, not settled", []step{{"noA", 1, 0, 3}, {"v2", 2, 0, 9}}, 6},
		{"a tree without a, applied", []step{{"noA", 2, 0, 0}, {"v2", 2, 0, 9}}, 6},
		{"a tree without a for 20s", []step{{"noA", 2, 20 * time.Second, 0}, {"v2", 2, 0, 9}}, 6},
		{"a file of a empty", []step{{"emptyA", 2, 0, 3}, {"v2", 2, 0, 9}}, 6},
		{"a missing target", []step{{"missing", 2, 0, 3}, {"v2", 2, 0, 9}}, 6},
		{"back and forth", []step{{"v2", 1, 0, 3}, {"v1", 1, 0, 3}, {"v2", 2, 0, 9}}, 6},
		{"to v2 and back", []step{{"v2", 2, 0, 9}, {"v1", 2, 0, 3}}, 0},
		{"the minute ends", []step{{"v2", 2, 30 * time.Second, 9}}, 8},
		{"a tree without a until the minute ends", []step{{"noA", 2, 30 * time.Second, 0}, {"v2", 2, 0, 9}}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			writeTree(t, base, map[string]string{
				"v1/config/a.yaml":          domainConfig("a", "3"),
				"v1/config/b.yaml":          domainConfig("b", "4"),
				"v2/config/a.yaml":          domainConfig("a", "9"),
				"v2/config/sluice-fmt.yaml": "rules:\n  - name: api\n    limit: 2\n    window: 1m\n",
				"noA/config/b.yaml":         domainConfig("b", "4"),
				"emptyA/config/a.yaml":      "",
				"emptyA/config/b.yaml":      domainConfig("b", "4"),
			})
			root := filepath.Join(base, "current")
			require.NoError(t, os.Symlink(filepath.Join(base, "v1"), root))
			clock := &vclock.Clock{}
			clock.NS.Store(start.UnixNano())
			var log logbuf.Buffer
			logger := slog.New(slog.NewTextHandler(&log, nil))
			dir := runtimeDir{root: root, app: "config", interval: time.Second}
			applied, err := dir.poll()
			require.NoError(t, err)
			doms, rules, err := dir.load(applied)
			require.NoError(t, err)
			l, err := sluice.New(sluice.Options{Clock: clock, Logger: logger}, rules...)
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			svc := &service{l: l}
			svc.rules.Store(doms)
			w := &watcher{dir: dir, applied: applied, l: l, store: svc.rules.Store, logger: logger}
			check := func(user string, hits uint64) *rlspb.RateLimitResponse_DescriptorStatus {
				d := desc("user", user)
				d.HitsAddend = wrapperspb.UInt64(hits)
				resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "a", Descriptors: []*extrl.RateLimitDescriptor{d}})
				require.NoError(t, err)
				return resp.Statuses[0]
			}

			check("u1", 1)
			require.Equal(t, uint32(1), check("u1", 1).LimitRemaining, "u1 counted twice under the limit 3")
			for i, st := range tc.steps {
				swapLink(t, filepath.Join(base, st.tree), root)
				for range st.polls {
					w.poll()
				}
				clock.NS.Add(int64(st.advance))
				require.Equal(t, st.limit, check("u1", 0).GetCurrentLimit().GetRequestsPerUnit(), "step %d (%s): domain a's limit; the log:\n%s", i, st.tree, log.String())
			}
			assert.Equal(t, tc.want, check("u1", 1).LimitRemaining, "u1's counts, and this one, under the last limit; the log:\n%s", log.String())
		})
	}
}

// TestServeRuntimeFlags: the flags name the layout too, over the
// environment; RUNTIME_WATCH_ROOT false with a plain directory.
func TestServeRuntimeFlags(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	writeTree(t, base, map[string]string{
		"srv/rl/limits/a.yaml":     domainConfig("a", "3"),
		"srv/rl/limits/.dot.yaml":  domainConfig("dot", "8"), // read: dot files are by default
		"srv/rl/config/wrong.yaml": domainConfig("a", "1"),
	})
	s := startServeEnv(t, map[string]string{"RUNTIME_ROOT": "/nonexistent", "RUNTIME_WATCH_ROOT": "false"},
		"-runtime-root", filepath.Join(base, "srv"), "-runtime-subdirectory", "rl", "-runtime-appdirectory", "limits")
	c := client(t, s.addr)
	assert.Equal(t, uint32(3), limitOf(t, c, "a", "u"))
	assert.Equal(t, uint32(8), limitOf(t, c, "dot", "u"))
	writeTree(t, base, map[string]string{"srv/rl/limits/a.yaml": domainConfig("a", "5")})
	require.Eventually(t, func() bool { return limitOf(t, c, "a", "u2") == 5 }, 30*time.Second, 100*time.Millisecond)
}

func TestServeRuntimeErrors(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	writeTree(t, base, map[string]string{
		"dup/config/a.yaml":   domainConfig("a", "3"),
		"dup/config/b.yaml":   domainConfig("a", "4"),
		"bad/config/a.yaml":   "domain: a\ndescriptors: [{key: user, rate_limit: {unit: fortnight}}]\n",
		"empty/config/.keep":  "",
		"empty/config/x.txt":  "",
		"plain/config/a.yaml": domainConfig("a", "3"),
	})
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		msg  string
	}{
		{"two files of one domain", map[string]string{"RUNTIME_ROOT": filepath.Join(base, "dup")}, nil, exitError, "one file per domain"},
		{"a bad file", map[string]string{"RUNTIME_ROOT": filepath.Join(base, "bad")}, nil, exitError, "fortnight"},
		{"no directory", map[string]string{"RUNTIME_ROOT": filepath.Join(base, "none")}, nil, exitError, "no such file"},
		{"both -config and a runtime", map[string]string{"RUNTIME_ROOT": filepath.Join(base, "plain")}, []string{"-config", "x.yaml"}, exitUsage, "one or the other"},
		{"no file", map[string]string{"RUNTIME_ROOT": filepath.Join(base, "empty")}, nil, exitError, "no configuration file"},
		{"a bad boolean", map[string]string{"RUNTIME_ROOT": filepath.Join(base, "plain"), "RUNTIME_IGNOREDOTFILES": "maybe"}, nil, exitUsage, "RUNTIME_IGNOREDOTFILES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			lookup := func(k string) (string, bool) {
				v, ok := tc.env[k]
				return v, ok
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			code := runServeEnv(ctx, append([]string{"-listen", "127.0.0.1:0"}, tc.args...), lookup, nil, &stderr, func(string) { cancel() })
			assert.Equal(t, tc.code, code, stderr.String())
			assert.Contains(t, stderr.String(), tc.msg)
		})
	}
}

// TestInspectRuntime: inspect reads the files serve would, from the same
// flags and environment variables.
func TestInspectRuntime(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	writeTree(t, base, map[string]string{
		"rl/config/a.yaml": domainConfig("a", "3"),
		"rl/config/b.yaml": domainConfig("b", "4"),
	})
	env := map[string]string{"RUNTIME_ROOT": base, "RUNTIME_SUBDIRECTORY": "rl"}
	lookup := func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
	var out, errOut bytes.Buffer
	code := runInspectEnv(context.Background(), nil, lookup, &out, &errOut)
	require.Equal(t, exitOK, code, errOut.String())
	assert.Contains(t, out.String(), filepath.Join(base, "rl", "config", "a.yaml")+`: envoy configuration, domain "a", 1 rule`+"\n")
	assert.Contains(t, out.String(), `domain "b"`)

	out.Reset()
	code = runInspectEnv(context.Background(), []string{"-runtime-root", base, "-runtime-subdirectory", "none"}, lookup, &out, &errOut)
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut.String(), "no such file")
}
