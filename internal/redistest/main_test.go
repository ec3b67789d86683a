package redistest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/internal/testpar"
)

// TestMain fails the package if any test leaves goroutines behind: servers,
// clusters and clients must be fully torn down by their cleanups.
//
// In the -short lane it runs six parallel tests at once (package testpar):
// they mostly wait on Redis processes and real time.
func TestMain(m *testing.M) {
	testpar.Short(6)
	leakcheck.VerifyTestMain(m)
}

// fakeTB records Fatalf/Skipf instead of failing the real test, so the
// failure paths of Start and friends can be tested. Everything else is
// delegated to the real test. Use it through capture.
type fakeTB struct {
	testing.TB
	mu    sync.Mutex
	fatal string
	skip  string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skip = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// capture runs fn with a fakeTB on its own goroutine (Fatalf and Skipf end
// it with runtime.Goexit) and returns the fakeTB once fn is over.
func capture(t *testing.T, fn func(tb testing.TB)) *fakeTB {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f
}

// ctxTimeout returns a context that ends after d or with the test.
func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
