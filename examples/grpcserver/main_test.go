package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// step is one command of the README's transcript and its output.
type step struct {
	args []string
	out  []string
}

// transcript reads the commands of the README's console block that call
// the server (-call) and their output.
func transcript(t *testing.T) []step {
	t.Helper()
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	var steps []step
	in := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "```console":
			in = true
		case line == "```":
			in = false
		case !in:
		case strings.HasPrefix(line, "$ go run ./examples/grpcserver -call"):
			steps = append(steps, step{args: strings.Fields(strings.TrimPrefix(line, "$ go run ./examples/grpcserver"))})
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, step{}) // the server itself: its output is not compared
		case len(steps) > 0:
			steps[len(steps)-1].out = append(steps[len(steps)-1].out, line)
		}
	}
	require.NoError(t, sc.Err())
	var calls []step
	for _, s := range steps {
		if s.args != nil {
			calls = append(calls, s)
		}
	}
	require.NotEmpty(t, calls, "the README has a transcript")
	return calls
}

var retryIn = regexp.MustCompile(`retry in (\S+)`)

// normalize parses a line of the client's output and returns it with its
// times replaced by "_", after checking that each is a number (or a
// duration): the sf-lists are parsed with httpsfv, their t parameters
// dropped, and serialized again.
func normalize(t *testing.T, line string) string {
	t.Helper()
	if m := retryIn.FindStringSubmatch(line); m != nil {
		_, err := time.ParseDuration(m[1])
		require.NoError(t, err, line)
		line = strings.Replace(line, m[0], "retry in _", 1)
	}
	name, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
	if !ok || !strings.HasPrefix(line, "  ") {
		return line
	}
	switch name {
	case "ratelimit-policy", "ratelimit":
		list, err := httpsfv.UnmarshalList([]string{v})
		require.NoError(t, err, line)
		for _, m := range list {
			it, ok := m.(httpsfv.Item)
			require.True(t, ok, line)
			if tv, ok := it.Params.Get("t"); ok {
				require.IsType(t, int64(0), tv, line)
				it.Params.Del("t")
			}
		}
		s, err := httpsfv.Marshal(list)
		require.NoError(t, err)
		return "  " + name + ": " + s
	case "x-ratelimit-reset", "retry-after":
		_, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, line)
		return "  " + name + ": _"
	}
	return line
}

// TestTranscript runs the example's server on a free loopback port and
// the README's client commands against it over a real connection, and
// compares each output with the README's, field by field.
func TestTranscript(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0"}, nil, tlog{t}, func(a string) { addrc <- a })
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatal(err)
	}
	for _, s := range transcript(t) {
		var out bytes.Buffer
		require.NoError(t, run(t.Context(), append(s.args, "-addr", addr), &out, tlog{t}, nil), "%v", s.args)
		got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
		var want, have []string
		for _, l := range s.out {
			want = append(want, normalize(t, l))
		}
		for _, l := range got {
			have = append(have, normalize(t, l))
		}
		assert.Equal(t, want, have, "go run ./examples/grpcserver %s", strings.Join(s.args, " "))
	}
}

// TestNormalizeCompares: the comparison sees a changed count, and only
// the times are free.
func TestNormalizeCompares(t *testing.T) {
	t.Parallel()
	a := normalize(t, `  ratelimit: "per-ip";r=9;t=61, "tenant";r=3;t=61`)
	assert.Equal(t, a, normalize(t, `  ratelimit: "per-ip";r=9;t=5, "tenant";r=3;t=60`))
	assert.NotEqual(t, a, normalize(t, `  ratelimit: "per-ip";r=8;t=61, "tenant";r=3;t=61`))
	assert.Equal(t, "  retry-after: _", normalize(t, "  retry-after: 12"))
	assert.Equal(t, `call 5: ResourceExhausted: rate limit "tenant" exceeded: retry in _`,
		normalize(t, `call 5: ResourceExhausted: rate limit "tenant" exceeded: retry in 59s`))
}

// tlog writes the example's log to the test's.
type tlog struct{ t *testing.T }

func (w tlog) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }
