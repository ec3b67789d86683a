package redistest

import "net"

// freePorts returns n distinct loopback ports that were free a moment ago
// (all listeners are held open until every port is known, so they cannot
// repeat). Someone else may take one before it is bound (an outgoing
// connection's ephemeral port, on a busy machine): Start retries for that.
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
