package httplimit_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/leakcheck"
)

// TestMain fails the package if its tests leave goroutines behind (every
// limiter closed, every server and client connection too).
func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}
