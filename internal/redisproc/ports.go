package redisproc

import "net"

// FreePorts returns n distinct 127.0.0.1 ports, none of them 6379 (a Redis
// the machine runs for other purposes), that were free a moment ago: every
// listener is held open until all n are known, so none repeats. Someone else
// may take one before the server binds it (an outgoing connection's
// ephemeral port, on a busy machine): the callers retry for that.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // held while the others are picked
		if p := l.Addr().(*net.TCPAddr).Port; p != 6379 {
			ports = append(ports, p)
		}
	}
	return ports, nil
}
