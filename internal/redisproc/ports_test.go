package redisproc

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFreePorts: FreePorts returns as many distinct ports as asked, never
// 6379. Whether
// a port is still free when it is bound is not asserted: another connection
// may take it meanwhile (one CI run lost that race), which the callers
// retry.
func TestFreePorts(t *testing.T) {
	t.Parallel()
	ports, err := FreePorts(8)
	require.NoError(t, err)
	require.Len(t, ports, 8)
	seen := map[int]bool{}
	for _, p := range ports {
		require.Greater(t, p, 0)
		require.LessOrEqual(t, p, 65535)
		require.NotEqual(t, 6379, p)
		require.False(t, seen[p], "port %d twice", p)
		seen[p] = true
	}
}
