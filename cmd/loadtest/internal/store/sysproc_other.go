//go:build unix && !linux

package store

import "syscall"

// serverAttr puts the server in its own process group (Close kills it; a
// load test that dies without closing it leaves it to the user).
func serverAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
