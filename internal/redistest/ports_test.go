package redistest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFreePorts: freePorts returns as many distinct ports as asked. Whether
// a port is still free when it is bound is not asserted: another connection
// may take it meanwhile (one CI run lost that race), which Start retries.
func TestFreePorts(t *testing.T) {
	t.Parallel()
	ports, err := freePorts(8)
	require.NoError(t, err)
	require.Len(t, ports, 8)
	seen := map[int]bool{}
	for _, p := range ports {
		require.Greater(t, p, 0)
		require.LessOrEqual(t, p, 65535)
		require.False(t, seen[p], "port %d twice", p)
		seen[p] = true
	}
}
