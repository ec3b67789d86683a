package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/report"
)

// TestRunTextPiped runs the main entry with its output going to buffers, as
// when it is piped to a file or a log: no carriage-return frames, one plain
// progress line per finished profile, and the report.
func TestRunTextPiped(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(append(quick, "-profile", "steady,boundary", "-duration", "1s", "-rate", "2000", "-workers", "2"), &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	out, errs := stdout.String(), stderr.String()
	assert.NotContains(t, out, "\r", "stdout has carriage returns")
	assert.NotContains(t, errs, "\r", "stderr has carriage returns")
	progress := regexp.MustCompile(`(?m)^loadtest: \[(\d)/2\] (\S+) done: \d+ checks in `).FindAllStringSubmatch(errs, -1)
	if assert.Len(t, progress, 2, "progress lines in %q", errs) {
		assert.Equal(t, []string{"1", "steady"}, progress[0][1:])
		assert.Equal(t, []string{"2", "boundary"}, progress[1][1:])
	}
	// The tables fit 120 columns; the verdict, one line per profile, and
	// its summary come last.
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for _, l := range lines {
		assert.LessOrEqual(t, utf8.RuneCountInString(l), report.Width, "too wide: %q", l)
	}
	v := strings.Index(out, "Verdict: what sluice promises")
	require.Positive(t, v, out)
	assert.Greater(t, v, strings.LastIndex(out, "note: "), "a note after the verdict")
	verdict := out[v:]
	for _, p := range []string{"steady", "boundary"} {
		assert.Regexp(t, "(?m)^"+p+` +[✓✗–] `, verdict)
	}
	last := lines[len(lines)-1]
	for i := len(lines) - 1; i > 0 && strings.HasPrefix(lines[i], "  "); i-- {
		last = lines[i-1] + last
	}
	assert.Regexp(t, `^Verdict: (all promises held|\d+ promises? broken)`, last)
}
