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
