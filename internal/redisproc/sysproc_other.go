//go:build unix && !linux

package redisproc

import "syscall"

// sysProcAttr puts the server in its own process group (Stop kills it; a
// parent that dies without stopping it leaves it running).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
