//go:build unix && !linux

package redistest

import "time"

// waitStopped gives SIGSTOP a moment to be delivered; there is no portable
// way to observe the stopped state.
func waitStopped(int, time.Duration) {
	time.Sleep(20 * time.Millisecond)
}
