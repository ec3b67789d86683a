package syncer

import (
	"testing"

	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/internal/testpar"
)

// TestMain fails the package if a test leaves goroutines behind: every
// Syncer's loop must end in Close, every client and server in its cleanup.
// No go-redis goroutine needs ignoring: the clients of package redistest are
// closed in t.Cleanup, and a closed client leaves nothing running.
//
// In the -short lane it runs six parallel tests at once (package testpar):
// they mostly wait on Redis processes and real time.
func TestMain(m *testing.M) {
	testpar.Short(6)
	leakcheck.VerifyTestMain(m)
}
