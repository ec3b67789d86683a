//go:build linux

package redistest

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
)

// sysProcAttr puts redis-server in its own process group (so the whole group
// can be signalled) and asks the kernel to SIGKILL it if the test binary dies
// without running its cleanups (for example on a `go test -timeout` panic).
//
// Pdeathsig is tied to the OS thread that started the child: it would also
// fire if that thread exited, which the Go runtime only does when a goroutine
// exits while locked to its thread (runtime.LockOSThread). Tests do not do
// that in practice, and the protection against leaked servers is worth it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits (bounded) until the process is in the stopped state, so
// that Pause returns only once the server really stopped answering.
func waitStopped(pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	path := fmt.Sprintf("/proc/%d/stat", pid)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		// Format: "pid (comm) S ...": the state follows the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
			if st := b[i+2]; st == 'T' || st == 't' {
				return
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}
