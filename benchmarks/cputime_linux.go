//go:build linux

package benchmarks

import (
	"syscall"
	"time"
)

// rusageThread is Linux's RUSAGE_THREAD, which package syscall does not name.
const rusageThread = 1

// ThreadCPU returns the CPU time (user + system) of the calling OS thread,
// and true. Lock the goroutine to its thread (runtime.LockOSThread) for the
// figure to be the goroutine's.
func ThreadCPU() (time.Duration, bool) { return rusage(rusageThread) }

// ProcessCPU returns the CPU time (user + system) of the whole process, every
// thread included, and true.
func ProcessCPU() (time.Duration, bool) { return rusage(syscall.RUSAGE_SELF) }

func rusage(who int) (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
