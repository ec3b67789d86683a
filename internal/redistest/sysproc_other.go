//go:build unix && !linux

package redistest

import (
	"syscall"
	"time"
)

// sysProcAttr puts redis-server in its own process group so the whole group
// can be signalled.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitStopped gives SIGSTOP a moment to be delivered; there is no portable
// way to observe the stopped state.
func waitStopped(int, time.Duration) {
	time.Sleep(20 * time.Millisecond)
}
