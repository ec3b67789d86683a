//go:build unix

package redisproc

import (
	"os"
	"syscall"
)

// killGroup kills p's process group (the server and anything it forked).
func killGroup(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}
