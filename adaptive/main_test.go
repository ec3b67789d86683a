package adaptive_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/leakcheck"
)

// TestMain fails the package if its tests leave goroutines behind.
func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}
