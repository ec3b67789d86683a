//go:build !linux

package benchmarks

import "time"

// ThreadCPU is not measured outside Linux: it returns false.
func ThreadCPU() (time.Duration, bool) { return 0, false }

// ProcessCPU is not measured outside Linux: it returns false.
func ProcessCPU() (time.Duration, bool) { return 0, false }
