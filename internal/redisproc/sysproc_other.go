//go:build unix && !linux

package redisproc

import "syscall"

// SysProcAttr puts a redis-server in its own process group, so that the
// whole group can be signalled (KillGroup); a parent that dies without
// stopping it leaves it running.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
