//go:build windows

package redisproc

import (
	"os"
	"syscall"
)

// sysProcAttr: no process groups here.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// killGroup kills the server.
func killGroup(p *os.Process) { _ = p.Kill() }
