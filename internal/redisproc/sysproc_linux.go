//go:build linux

package redisproc

import "syscall"

// SysProcAttr puts a redis-server in its own process group (so that the
// whole group can be signalled, KillGroup) and asks the kernel to SIGKILL it
// if its parent dies without stopping it (a test binary's -timeout panic, a
// killed load test).
//
// Pdeathsig is tied to the OS thread that started the child: it would also
// fire if that thread exited, which the Go runtime only does when a
// goroutine exits while locked to its thread (runtime.LockOSThread). The
// callers do not do that, and the protection against leaked servers is
// worth it.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
