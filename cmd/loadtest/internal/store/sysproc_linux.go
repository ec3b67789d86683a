//go:build linux

package store

import "syscall"

// serverAttr puts the server in its own process group and has the kernel
// kill it if the load test dies without closing it.
func serverAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
