package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const dialLine = "redis: connection pool: failed to dial after %d attempts: %v"

func TestStoreLog(t *testing.T) {
	t.Parallel()
	type line struct {
		format string
		args   []any
	}
	dial := line{dialLine, []any{5, "dial tcp 127.0.0.1:1: connect: connection refused"}}
	other := line{"redis: %s", []any{"something else\n"}}
	for _, c := range []struct {
		name      string
		file      bool
		before    []line // logged before the mark
		after     []line
		wantNote  []string // "" entries: no note
		wantLines int      // in the file
	}{
		{name: "nothing since the mark", file: true, before: []line{dial}, wantNote: []string{""}, wantLines: 1},
		{name: "dials counted", after: []line{dial, dial, other}, wantNote: []string{
			"go-redis logged 3 lines (2 of them \"failed to dial\"", "counted, not shown (-out DIR keeps them in DIR/redis.log)",
			`first: "redis: connection pool: failed to dial after 5 attempts`,
		}},
		{name: "to a file", file: true, before: []line{other}, after: []line{other, dial}, wantNote: []string{
			"go-redis logged 2 lines (1 of them \"failed to dial\"", "written to ", "redis.log, not shown", `first: "redis: something else"`,
		}, wantLines: 3},
		{name: "one other line", after: []line{other}, wantNote: []string{"go-redis logged 1 line: counted"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var l storeLog
			path := ""
			if c.file {
				path = filepath.Join(t.TempDir(), "redis.log")
			}
			l.reset(path)
			for _, x := range c.before {
				l.Printf(context.Background(), x.format, x.args...)
			}
			m := l.mark()
			for _, x := range c.after {
				l.Printf(context.Background(), x.format, x.args...)
			}
			note := l.note(m)
			for _, want := range c.wantNote {
				if want == "" {
					assert.Empty(t, note)
					continue
				}
				assert.Contains(t, note, want)
			}
			l.close()
			if !c.file {
				return
			}
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			assert.Len(t, got, c.wantLines, "%q", b)
		})
	}
}

// TestGoRedisLogRouted: a go-redis client that cannot dial logs through
// the installed storeLog, not on stderr. Not parallel: the logger is
// global.
func TestGoRedisLogRouted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	var l storeLog
	path := filepath.Join(t.TempDir(), "redis.log")
	l.reset(path)
	redis.SetLogger(&l)
	t.Cleanup(func() { redis.SetLogger(redisLog) })

	c := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.Error(t, c.Ping(ctx).Err())
	n := l.mark()
	assert.GreaterOrEqual(t, n.lines, int64(1))
	assert.GreaterOrEqual(t, n.dials, int64(1))
	l.close()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(b), "failed to dial")
}

// TestOutageQuiet runs the -outage demo into buffers: go-redis's dial
// failures never reach the output; when there were any, a note counts them
// and -out's redis.log holds them.
func TestOutageQuiet(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(append(quick, "-profile", "steady", "-duration", "2s", "-outage", "600ms", "-rate", "2000", "-workers", "2", "-out", dir), &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	// Lines wrapped to the terminal's width go on indented: join them.
	out := strings.ReplaceAll(stdout.String()+stderr.String(), "\n  ", " ")
	noted := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, dialFailure) {
			// Only the note quotes one, once.
			assert.True(t, strings.HasPrefix(line, "note (steady): go-redis logged"), "a go-redis line in the output: %q", line)
			noted++
		}
	}
	assert.LessOrEqual(t, noted, 1, "%s", out)
	b, err := os.ReadFile(filepath.Join(dir, "redis.log"))
	if os.IsNotExist(err) {
		assert.NotContains(t, out, "go-redis logged")
		t.Log("go-redis logged nothing during the outage")
		return
	}
	require.NoError(t, err)
	assert.Contains(t, out, "go-redis logged")
	assert.Contains(t, out, "written to "+filepath.Join(dir, "redis.log"))
	assert.NotEmpty(t, b)
	t.Logf("redis.log: %d lines", bytes.Count(b, []byte("\n")))
}
