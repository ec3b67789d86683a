//go:build windows

package redisproc

import (
	"os"
	"syscall"
)

// SysProcAttr: no process groups here.
func SysProcAttr() *syscall.SysProcAttr { return nil }

// KillGroup kills the server.
func KillGroup(p *os.Process) { _ = p.Kill() }
