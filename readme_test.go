package sluice_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeQuickStart: the README's quick start is examples/quickstart,
// which the build compiles, word for word, so that it cannot rot.
func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	prog, err := os.ReadFile("examples/quickstart/main.go")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(readme), "## Quick start")
	require.True(t, ok, "README has a Quick start section")
	_, block, ok := strings.Cut(rest, "```go\n")
	require.True(t, ok, "the Quick start has a Go block")
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)
	require.Equal(t, string(prog), block, "README's quick start and examples/quickstart/main.go differ")
}
