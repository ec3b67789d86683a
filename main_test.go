package sluice_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/leakcheck"
)

// TestMain fails the package if its tests leave goroutines behind: every
// limiter's loops must end in Close, every client and server in its cleanup.
// (The system tests, in their own module, run goleak the same way.)
func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}
