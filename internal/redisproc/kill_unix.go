//go:build unix

package redisproc

import (
	"os"
	"syscall"
)

// KillGroup SIGKILLs p's process group (the server and anything it forked;
// a stopped process too), or p alone if the group cannot be signalled.
func KillGroup(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}
