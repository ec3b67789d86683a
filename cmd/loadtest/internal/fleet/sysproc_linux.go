//go:build linux

package fleet

import "syscall"

// childAttr makes a child die with its parent.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
