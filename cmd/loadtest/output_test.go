package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	lines := regexp.MustCompile(`(?m)^loadtest: \[(\d)/2\] (\S+) done: \d+ checks in `).FindAllStringSubmatch(errs, -1)
	if assert.Len(t, lines, 2, "progress lines in %q", errs) {
		assert.Equal(t, []string{"1", "steady"}, lines[0][1:])
		assert.Equal(t, []string{"2", "boundary"}, lines[1][1:])
	}
	assert.True(t, strings.Contains(out, "steady") && strings.Contains(out, "boundary"), "report: %s", out)
}
