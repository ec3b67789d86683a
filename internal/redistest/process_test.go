package redistest

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStartFailureReportsLogTail(t *testing.T) {
	t.Parallel()
	f := capture(t, func(tb testing.TB) {
		Start(tb, WithArgs("--no-such-directive", "1"))
	})
	require.Contains(t, f.fatal, "redistest: starting redis-server")
	require.Contains(t, f.fatal, "exited during startup")
	require.Contains(t, f.fatal, "no-such-directive", "the message carries the tail of the server's output")
}

func TestLaunchDetectsBusyPort(t *testing.T) {
	t.Parallel()
	// Occupy a port, then let a server try it: launch must report a busy
	// port (so Start would pick another one) and leave nothing running.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()

	s := Start(t)
	s.Kill()
	s.port = l.Addr().(*net.TCPAddr).Port
	err = s.launch()
	require.ErrorIs(t, err, errPortBusy)
	require.Nil(t, s.proc)
}
