package sluice_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/policy"
)

// rulesFile is a configuration of two rules, a and b, both with limit.
func rulesFile(limit int) string {
	return strings.ReplaceAll("rules:\n  - {name: a, limit: L, window: 1m}\n  - {name: b, limit: L, window: 1m}\n", "L", strconv.Itoa(limit))
}

// watchEnv drives a FileWatcher on a virtual timeline: each step is at a
// time the test advances, never behind the real clock (the file's
// modification times are real).
type watchEnv struct {
	t      *testing.T
	l      *sluice.Limiter
	fw     sluice.FileWatcher
	dir    string
	path   string
	now    time.Time
	loaded []policy.Config
}

const testSettle = 10 * time.Second // far above any real pause in these tests

func newWatchEnv(t *testing.T) *watchEnv {
	t.Helper()
	e := &watchEnv{t: t, dir: t.TempDir()}
	e.path = filepath.Join(e.dir, "rules.yaml")
	l, err := sluice.New(sluice.Options{}, policy.Rule{Name: "boot", Limit: 1, Window: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	e.l = l
	e.fw = sluice.NewFileWatcher(l, e.path, sluice.WatchOptions{Interval: time.Second, Settle: testSettle,
		Loaded: func(c policy.Config) { e.loaded = append(e.loaded, c) }})
	// The file in force: written long ago, applied at the first step.
	require.NoError(t, os.WriteFile(e.path, []byte(rulesFile(5)), 0o600))
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(e.path, old, old))
	e.now = time.Now()
	tried, err := e.fw.Step(e.now)
	require.NoError(t, err)
	require.True(t, tried)
	e.requireLimit(5)
	return e
}

// step polls at d after the previous step (or later, if the real clock is
// ahead) and checks that the rules in force are one whole file.
func (e *watchEnv) step(d time.Duration) (tried bool, err error) {
	e.t.Helper()
	e.now = e.now.Add(d)
	if now := time.Now(); now.After(e.now) {
		e.now = now
	}
	tried, err = e.fw.Step(e.now)
	a, okA := e.l.Rule("a")
	b, okB := e.l.Rule("b")
	require.True(e.t, okA && okB, "a rule of the file is missing: a partial file was applied")
	require.Equal(e.t, a.Limit, b.Limit, "the rules in force mix two files")
	for _, c := range e.loaded {
		require.Len(e.t, c.Rules, 2, "a partial file was loaded")
	}
	return tried, err
}

// wait steps n times at the given spacing, and requires that none read
// the file.
func (e *watchEnv) wait(d time.Duration, n int) {
	e.t.Helper()
	for range n {
		tried, err := e.step(d)
		require.NoError(e.t, err)
		require.False(e.t, tried, "read before it settled")
	}
}

// applies steps once more, d later, and requires the file applied with
// limit.
func (e *watchEnv) applies(d time.Duration, limit int64) {
	e.t.Helper()
	tried, err := e.step(d)
	require.NoError(e.t, err)
	require.True(e.t, tried, "settled, yet not read")
	e.requireLimit(limit)
}

func (e *watchEnv) requireLimit(limit int64) {
	e.t.Helper()
	for _, name := range []string{"a", "b"} {
		r, ok := e.l.Rule(name)
		require.True(e.t, ok, name)
		require.Equal(e.t, limit, r.Limit, name)
	}
}

// inPlace opens the file for an in-place rewrite (truncating it, as a
// shell's > does).
func (e *watchEnv) inPlace() *os.File {
	f, err := os.OpenFile(e.path, os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(e.t, err)
	return f
}

// stamp sets the modification time of the file at path (the watched one
// if empty) to the virtual now: a write at now.
func (e *watchEnv) stamp(path string) {
	e.t.Helper()
	if path == "" {
		path = e.path
	}
	require.NoError(e.t, os.Chtimes(path, e.now, e.now))
}

// write writes s to f, at the virtual now.
func (e *watchEnv) write(f *os.File, s string) {
	e.t.Helper()
	_, err := io.WriteString(f, s)
	require.NoError(e.t, err)
	require.NoError(e.t, f.Sync())
	e.stamp(f.Name())
}

// TestWatchSettles: every way of writing the file is applied once it has
// settled, whole, and never before: the rules in force are always one
// whole file (checked at every step, each a poll).
func TestWatchSettles(t *testing.T) {
	t.Parallel()
	next := rulesFile(7)
	cut := strings.Index(next, "  - {name: b") // a valid prefix: rule a alone
	tests := []struct {
		name  string
		write func(e *watchEnv)
	}{
		{"truncate, partial write, the rest after a pause", func(e *watchEnv) {
			f := e.inPlace()
			e.stamp("")
			e.wait(testSettle/2, 1) // truncated: empty
			e.write(f, next[:cut])
			e.wait(testSettle/4, 3) // a valid prefix for most of the settle period
			e.write(f, next[cut:])
			require.NoError(t, f.Close())
			e.wait(testSettle/2, 2)
			e.applies(testSettle/2, 7)
		}},
		{"truncate and write in one go", func(e *watchEnv) {
			require.NoError(t, os.WriteFile(e.path, []byte(next), 0o600))
			e.stamp("")
			e.wait(testSettle/2, 2)
			e.applies(testSettle/2, 7)
		}},
		{"cp over the file", func(e *watchEnv) {
			src := filepath.Join(e.dir, "src.yaml")
			require.NoError(t, os.WriteFile(src, []byte(next), 0o600))
			old := time.Now().Add(-time.Hour)
			require.NoError(t, os.Chtimes(src, old, old))
			out, err := exec.Command("cp", src, e.path).CombinedOutput()
			require.NoError(t, err, "%s", out)
			e.stamp("")
			e.wait(testSettle/2, 2)
			e.applies(testSettle/2, 7)
		}},
		{"cp -p over the file (the source's old mtime)", func(e *watchEnv) {
			src := filepath.Join(e.dir, "src.yaml")
			require.NoError(t, os.WriteFile(src, []byte(next), 0o600))
			old := time.Now().Add(-time.Hour)
			require.NoError(t, os.Chtimes(src, old, old))
			out, err := exec.Command("cp", "-p", src, e.path).CombinedOutput()
			require.NoError(t, err, "%s", out)
			e.wait(testSettle/2, 2) // the same file: it settles like any in-place write
			e.applies(testSettle/2, 7)
		}},
		{"editor save: temp file written just now, renamed over", func(e *watchEnv) {
			tmp := filepath.Join(e.dir, ".rules.yaml.tmp")
			require.NoError(t, os.WriteFile(tmp, []byte(next), 0o600))
			e.stamp(tmp)
			require.NoError(t, os.Rename(tmp, e.path))
			e.wait(testSettle/2, 1)
			e.applies(testSettle, 7)
		}},
		{"temp file written earlier, renamed over: applied at the next poll", func(e *watchEnv) {
			tmp := filepath.Join(e.dir, ".rules.yaml.tmp")
			require.NoError(t, os.WriteFile(tmp, []byte(next), 0o600))
			e.stamp(tmp)
			e.now = e.now.Add(testSettle) // the temp file is Settle old when the rename lands
			require.NoError(t, os.Rename(tmp, e.path))
			e.applies(0, 7)
		}},
		{"vim-style: the file renamed to a backup, a new one written in two parts", func(e *watchEnv) {
			backup := e.path + "~"
			require.NoError(t, os.Rename(e.path, backup))
			tried, err := e.step(time.Second)
			require.ErrorIs(t, err, os.ErrNotExist, "no file for a moment: the rules in force stay")
			require.False(t, tried)
			f, err := os.OpenFile(e.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			require.NoError(t, err)
			e.write(f, next[:cut])
			e.wait(testSettle/4, 3)
			e.write(f, next[cut:])
			require.NoError(t, f.Close())
			require.NoError(t, os.Remove(backup))
			e.wait(testSettle/2, 2)
			e.applies(testSettle/2, 7)
		}},
		{"a FIFO renamed over the file, then a file", func(e *watchEnv) {
			fifo := filepath.Join(e.dir, "fifo")
			require.NoError(t, syscall.Mkfifo(fifo, 0o600))
			require.NoError(t, os.Rename(fifo, e.path))
			for range 2 {
				tried, err := e.step(testSettle)
				require.Error(t, err)
				assert.Contains(t, err.Error(), "not a regular file")
				require.False(t, tried)
			}
			tmp := filepath.Join(e.dir, "tmp")
			require.NoError(t, os.WriteFile(tmp, []byte(next), 0o600))
			e.stamp(tmp)
			require.NoError(t, os.Rename(tmp, e.path))
			e.wait(time.Second, 1)
			e.applies(testSettle, 7)
		}},
		{"touched: read once, nothing applied", func(e *watchEnv) {
			e.stamp("")
			e.wait(testSettle/2, 1)
			e.applies(testSettle, 5)
			require.Len(t, e.loaded, 1, "the same content is not applied again")
			e.wait(testSettle, 2)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newWatchEnv(t)
			tt.write(e)
			e.wait(testSettle, 2) // and nothing more to read
		})
	}
}

// TestWatchFileFIFO: a FIFO at the watched path, at the start or later,
// blocks neither WatchFile nor the watching nor Close.
func TestWatchFileFIFO(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	var logs logbuf.Buffer
	l, err := sluice.New(sluice.Options{Logger: newTextLogger(&logs)}, policy.Rule{Name: "a", Limit: 1, Window: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })

	err = bounded(t, func() error {
		return l.WatchFile(context.Background(), path, sluice.WatchOptions{Interval: 5 * time.Millisecond})
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a regular file")

	require.NoError(t, os.Remove(path))
	require.NoError(t, os.WriteFile(path, []byte(rulesFile(5)), 0o600))
	require.NoError(t, bounded(t, func() error {
		return l.WatchFile(context.Background(), path, sluice.WatchOptions{Interval: 5 * time.Millisecond})
	}))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	require.NoError(t, os.Rename(fifo, path))
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "not a regular file") }, 10*time.Second, 5*time.Millisecond)
	_, ok := l.Rule("b")
	assert.True(t, ok, "the rules in force stay")
	require.NoError(t, bounded(t, l.Close))
}

// bounded runs f and returns its error, failing the test if f has not
// returned after a minute (a hang, not a slow machine).
func bounded(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("hung")
		return nil
	}
}

// watching starts a limiter (with logger, nil for none, and one boot rule)
// that watches path every 5ms with settle (0 for the default), and returns
// it with the channel its Loaded callback sends each loaded configuration
// on, the first included.
func watching(t *testing.T, path string, logger *slog.Logger, settle time.Duration) (*sluice.Limiter, <-chan policy.Config) {
	t.Helper()
	l, err := sluice.New(sluice.Options{Logger: logger}, policy.Rule{Name: "boot", Limit: 1, Window: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	loaded := make(chan policy.Config, 10)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, l.WatchFile(ctx, path, sluice.WatchOptions{Interval: 5 * time.Millisecond, Settle: settle,
		Loaded: func(c policy.Config) { loaded <- c }}))
	return l, loaded
}

// TestWatchFileInPlace: the real watching loop, polling every 5ms, follows
// in-place rewrites that pause between their two parts: every
// configuration it applies is whole.
func TestWatchFileInPlace(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(rulesFile(5)), 0o600))
	// The parts are written 20ms apart: far below Settle, even on a busy
	// machine, so that a half-written file is never settled.
	_, loaded := watching(t, path, nil, time.Second)
	require.Len(t, (<-loaded).Rules, 2)
	for _, limit := range []int{7, 9} {
		next := rulesFile(limit)
		cut := strings.Index(next, "  - {name: b")
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		require.NoError(t, err)
		_, err = io.WriteString(f, next[:cut])
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
		_, err = io.WriteString(f, next[cut:])
		require.NoError(t, err)
		require.NoError(t, f.Close())
		c := <-loaded
		require.Len(t, c.Rules, 2, "a partial file was applied")
		assert.Equal(t, int64(limit), c.Rules[1].Limit)
	}
}

// TestWatchFileDropsRoutedRule: a reload that leaves out the rule an
// httplimit route checks is refused, logged at Error, and the route goes
// on limiting with the rules in force.
func TestWatchFileDropsRoutedRule(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	replace := func(s string) {
		tmp := filepath.Join(dir, "tmp")
		require.NoError(t, os.WriteFile(tmp, []byte(s), 0o600))
		old := time.Now().Add(-time.Hour) // written long ago: applied at the next poll
		require.NoError(t, os.Chtimes(tmp, old, old))
		require.NoError(t, os.Rename(tmp, path))
	}
	replace("rules:\n  - {name: a, limit: 5, window: 1m}\n  - {name: b, limit: 2, window: 1m}\n")
	var logs logbuf.Buffer
	l, loaded := watching(t, path, slog.New(slog.NewJSONHandler(&logs, nil)), 0)
	<-loaded
	mw, err := httplimit.New(httplimit.Config{Limiter: l, ErrorMode: httplimit.ErrorReject,
		Routes: []httplimit.Route{{Pattern: "/b/", Rules: []httplimit.Rule{{Name: "b"}}}}})
	require.NoError(t, err)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })))
	t.Cleanup(srv.Close)
	status := func() int {
		resp, err := srv.Client().Get(srv.URL + "/b/")
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, status())

	replace("rules:\n  - {name: a, limit: 6, window: 1m}\n  - {name: c, limit: 2, window: 1m}\n")
	var refused map[string]any
	require.Eventually(t, func() bool {
		for line := range strings.Lines(logs.String()) {
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &rec))
			if rec["msg"] == "sluice: configuration not applied; the rules in force stay" {
				refused = rec
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, "ERROR", refused["level"])
	assert.Contains(t, refused["err"], `"b" (checked by httplimit route "/b/")`)
	assert.Equal(t, path, refused["file"])
	r, _ := l.Rule("a")
	assert.Equal(t, int64(5), r.Limit, "nothing of the refused file applies")
	assert.Equal(t, http.StatusOK, status())
	assert.Equal(t, http.StatusTooManyRequests, status(), "the route still limits")

	// A file that keeps the routed rule applies.
	replace("rules:\n  - {name: a, limit: 6, window: 1m}\n  - {name: b, limit: 3, window: 1m}\n")
	c := <-loaded
	assert.Len(t, c.Rules, 2)
	assert.Equal(t, http.StatusOK, status(), "b's new limit, its counts kept")
	assert.Equal(t, http.StatusTooManyRequests, status())
	runtime.KeepAlive(mw)
	require.NoError(t, bounded(t, l.Close))
}

// TestWatchFileHung: a file system that stops answering (a stat that
// never returns, as on a hung network mount) fails the first load after
// the stall bound, and while watching is reported at Warn and stalls
// neither the limiter nor Close.
func TestWatchFileHung(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(rulesFile(5)), 0o600))
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(path, old, old))
	unblock := make(chan struct{})
	t.Cleanup(func() { close(unblock) })
	var hang atomic.Bool
	stat := func(p string) (os.FileInfo, error) {
		if hang.Load() {
			<-unblock
		}
		return os.Stat(p)
	}
	var logs logbuf.Buffer
	l, err := sluice.New(sluice.Options{Logger: newTextLogger(&logs)}, policy.Rule{Name: "boot", Limit: 1, Window: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	o := sluice.WatchOptions{Interval: 5 * time.Millisecond}

	hang.Store(true)
	err = bounded(t, func() error { return l.WatchFileStat(context.Background(), path, o, stat, 50*time.Millisecond) })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no answer from the file system")
	_, ok := l.Rule("a")
	assert.False(t, ok, "the abandoned first load applies nothing")

	hang.Store(false)
	require.NoError(t, bounded(t, func() error { return l.WatchFileStat(context.Background(), path, o, stat, 50*time.Millisecond) }))
	_, ok = l.Rule("a")
	require.True(t, ok)
	hang.Store(true)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "configuration file does not answer") }, 10*time.Second, 5*time.Millisecond)
	use(t, l, "a", "k", 1) // checks go on
	require.NoError(t, bounded(t, l.Close))
}

// TestWatchSettledPrefixKeepsCounts: an in-place writer that stalls past
// Settle has its prefix applied (the documented risk of writing in
// place); the rule the prefix left out comes back with its counts, so an
// exhausted key stays denied: no second limit in one window.
func TestWatchSettledPrefixKeepsCounts(t *testing.T) {
	t.Parallel()
	e := newWatchEnv(t)
	use(t, e.l, "b", "k", 5)
	next := rulesFile(5)
	cut := strings.Index(next, "  - {name: b")
	f := e.inPlace()
	e.write(f, next[:cut])
	stepAt := func(d time.Duration) bool {
		e.now = e.now.Add(d)
		tried, err := e.fw.Step(e.now)
		require.NoError(t, err)
		return tried
	}
	require.False(t, stepAt(time.Second))
	require.True(t, stepAt(testSettle), "the stalled prefix has settled")
	_, err := e.l.Allow(context.Background(), "b", "k")
	require.ErrorIs(t, err, sluice.ErrUnknownRule, "the prefix is in force")
	e.write(f, next[cut:])
	require.NoError(t, f.Close())
	require.False(t, stepAt(time.Second))
	require.True(t, stepAt(testSettle))
	e.requireLimit(5)
	d, err := e.l.Allow(context.Background(), "b", "k")
	require.NoError(t, err)
	assert.False(t, d.Allowed, "b came back with its counts")
}
