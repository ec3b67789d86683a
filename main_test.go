package sluice_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/internal/testpar"
)

// shortParallel is how many parallel tests run at once in the -short lane
// (package testpar): most of this package's wait on real time, a real
// store's, and use a fraction of a CPU meanwhile.
const shortParallel = 6

// zoneDir is the time zone directory the tests write zones of their own
// into (testZone): ZONEINFO, which time.LoadLocation reads first, falling
// back to the system's database for the zones it does not hold.
var zoneDir string

// TestMain fails the package if its tests leave goroutines behind: every
// limiter's loops must end in Close, every client and server in its cleanup.
// (The system tests, in their own module, run goleak the same way.) It
// points ZONEINFO at zoneDir first: time.LoadLocation reads it once.
func TestMain(m *testing.M) {
	testpar.Short(shortParallel)
	dir, err := os.MkdirTemp("", "sluice-zoneinfo-")
	if err == nil && os.Setenv("ZONEINFO", dir) == nil {
		zoneDir = dir
	}
	code := m.Run()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	if code == 0 {
		if err := leakcheck.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "leakcheck: the tests passed but %v", err)
			code = 1
		}
	}
	os.Exit(code)
}
