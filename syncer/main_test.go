package syncer

import (
	"testing"

	"github.com/sluicehq/sluice/internal/leakcheck"
)

// TestMain fails the package if a test leaves goroutines behind: every
// Syncer's loop must end in Close, every client and server in its cleanup.
// No go-redis goroutine needs ignoring: the clients of package redistest are
// closed in t.Cleanup, and a closed client leaves nothing running.
func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}
