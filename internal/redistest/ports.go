package redistest

import (
	"net"
	"testing"
)

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago.
// Someone else may take it before you bind it; Start retries for that.
func FreePort(tb testing.TB) int {
	tb.Helper()
	ports, err := freePorts(1)
	if err != nil {
		tb.Fatalf("redistest: finding a free port: %v", err)
	}
	return ports[0]
}

// freePorts returns n distinct free loopback ports (all listeners are held
// open until every port is known, so they cannot repeat).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
