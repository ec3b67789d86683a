//go:build linux

package benchmarks

import "syscall"

// sysProcAttr puts redis-server in its own process group and has the kernel
// kill it if the benchmark binary dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
