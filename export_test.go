package sluice

import (
	"context"
	"os"
	"time"
)

// SetWaitAdmitted sets the hook that sees each queued waiter's context as it
// is admitted, in admission order (nil: none). Tests only.
func SetWaitAdmitted(h func(ctx context.Context)) { waitAdmitted = h }

// FileWatcher runs WatchFile's polls one at a time, at times the test
// chooses. Tests only.
type FileWatcher struct{ w *watcher }

// NewFileWatcher returns the watcher WatchFile would run for path, without
// starting it.
func NewFileWatcher(l *Limiter, path string, o WatchOptions) FileWatcher {
	return FileWatcher{newWatcher(l, path, o)}
}

// Step polls the file once at now (compared with the file's modification
// time and the earlier polls' times): tried reports that the file had
// settled and was read; err why it was not applied.
func (f FileWatcher) Step(now time.Time) (tried bool, err error) {
	r := f.w.step(context.Background(), now)
	return r.tried, r.err
}

// WatchFileStat is WatchFile with stat in place of os.Stat for the polls
// (a file system that hangs), and stall in place of the time the first
// load waits for a poll and the watching waits before it warns.
func (l *Limiter) WatchFileStat(ctx context.Context, path string, o WatchOptions, stat func(string) (os.FileInfo, error), stall time.Duration) error {
	w := newWatcher(l, path, o)
	w.stat, w.stall = stat, stall
	return l.watchFile(ctx, w)
}

// RenewInFlight renews l's fleet leases and removes those queued for
// removal now, as its renewal loop does every third of a lease, and returns
// the store's error. Tests only.
func RenewInFlight(l *Limiter) error { return l.inf.renew(true) }

// InFlightHeld returns the slots of key under the InFlight rule this
// process counts as held (-1 for an unknown rule). Tests only.
func InFlightHeld(l *Limiter, rule, key string) int64 {
	r := l.inf.rule(rule)
	if r == nil {
		return -1
	}
	return r.heldLocal(key)
}

// InFlightLeases returns the number of fleet leases l renews. Tests only.
func InFlightLeases(l *Limiter) int {
	l.inf.mu.Lock()
	defer l.inf.mu.Unlock()
	return len(l.inf.held)
}

// InFlightTTL returns the lease of l's fleet slots. Tests only.
func InFlightTTL(l *Limiter) time.Duration { return l.inf.ttl }
