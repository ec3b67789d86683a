//go:build !linux

package fleet

import "syscall"

// childAttr: children watch their stdin for the parent's death instead.
func childAttr() *syscall.SysProcAttr { return nil }
