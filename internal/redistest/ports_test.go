package redistest

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFreePort(t *testing.T) {
	t.Parallel()
	p := FreePort(t)
	require.Greater(t, p, 0)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	require.NoError(t, err, "FreePort returned a port we cannot bind")
	require.NoError(t, l.Close())
}
