//go:build windows

package store

import (
	"os"
	"syscall"
)

// serverAttr: no process group on Windows.
func serverAttr() *syscall.SysProcAttr { return nil }

// killGroup kills the server.
func killGroup(p *os.Process) { _ = p.Kill() }
