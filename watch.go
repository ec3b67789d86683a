package sluice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// DefaultWatchInterval is the polling interval of WatchOptions that leave
// Interval zero.
const DefaultWatchInterval = time.Second

// watchStall is the least time WatchFile waits for the file system to
// answer one poll before it gives up on the first load, or warns while
// watching.
const watchStall = 10 * time.Second

// WatchOptions configures WatchFile.
type WatchOptions struct {
	// Interval is how often the file is checked for a change; default
	// DefaultWatchInterval. A check is one stat; the file is read only
	// once a change has settled.
	Interval time.Duration
	// Settle is how long a changed file must stay unchanged (the same
	// file, size and modification time) before it is read and applied;
	// default the Interval. A file written in place is applied at the
	// first poll at least Settle after the poll that first saw it in its
	// final state; a file renamed over the path (or a new file) whose last
	// write is at least Settle old when a poll first sees it is applied at
	// that poll. See docs/configuration.md, "Writing the file".
	Settle time.Duration
	// Loaded, if set, is called with every configuration applied, the
	// first one included, one call at a time: keep the latest for
	// Config.Match.
	Loaded func(policy.Config)
}

// WatchFile applies the rules of the configuration file at path (see
// policy.LoadFile) with SetRules, and then keeps them in step with the
// file: it polls it every Interval and applies it again once a change has
// settled (WatchOptions.Settle): a file caught half-written is never
// applied. A settled change that does not load, or that SetRules refuses
// (an invalid rule, a rule left out that a route still checks: see
// Require), keeps the rules in force and is logged at Error
// (Options.Logger) with the file's line and field; the next change is
// tried again. Every applied change is logged by SetRules.
//
// Only a regular file is read (a FIFO, a device or a directory at path is
// refused), and without blocking on open. Every poll runs apart from the
// watching loop, so a file system that stops answering (a hung network
// mount) stalls neither the watching nor Close: such a poll is waited for,
// with a Warn after 10 s, and no other starts meanwhile.
//
// The first load is synchronous: it waits for the file to settle (at
// once for a file last written at least Settle ago), and its error is
// returned and nothing is watched; so is a file system that does not
// answer within max(10 s, 3 Intervals, 3 Settles). After it, watching
// runs in its own goroutine until ctx ends or the limiter is closed.
// Polling needs no file-system notifications, so it also follows a file
// replaced by a rename (as editors and Kubernetes ConfigMaps do).
func (l *Limiter) WatchFile(ctx context.Context, path string, o WatchOptions) error {
	return l.watchFile(ctx, newWatcher(l, path, o))
}

func (l *Limiter) watchFile(ctx context.Context, w *watcher) error {
	if err := w.first(ctx); err != nil {
		return err
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		w.watch(ctx)
	}()
	return nil
}

type watcher struct {
	l     *Limiter
	path  string
	o     WatchOptions
	stall time.Duration
	stat  func(string) (os.FileInfo, error) // os.Stat; tests make it hang

	// The step's state: only the running step touches it.
	done    os.FileInfo // the file last read once settled (applied or not); nil before
	seen    os.FileInfo // the file as the steps see it, while it differs from done
	since   time.Time   // when a step first saw seen
	content []byte      // the content last applied

	gone atomic.Bool // the caller gave up on a step that may still run: apply nothing
}

// stepResult is what one poll of the file found.
type stepResult struct {
	tried bool  // the file had settled and was read (applied, unchanged or refused)
	err   error // why the file was not applied
	// unreadable marks an err about the file, not its content: it is
	// missing, not a regular file, or cannot be read.
	unreadable bool
}

func newWatcher(l *Limiter, path string, o WatchOptions) *watcher {
	if o.Interval <= 0 {
		o.Interval = DefaultWatchInterval
	}
	if o.Settle <= 0 {
		o.Settle = o.Interval
	}
	return &watcher{l: l, path: path, o: o, stall: max(watchStall, 3*o.Interval, 3*o.Settle), stat: os.Stat}
}

// start runs a step at now in its own goroutine and returns the channel
// its result arrives on.
func (w *watcher) start(ctx context.Context, now time.Time) <-chan stepResult {
	ch := make(chan stepResult, 1)
	go func() { ch <- w.step(ctx, now) }()
	return ch
}

// first applies the file once it has settled, waiting for it within
// w.stall.
func (w *watcher) first(ctx context.Context) error {
	give := time.NewTimer(w.stall)
	defer give.Stop()
	giveUp := func(err error) error {
		w.gone.Store(true)
		return err
	}
	for {
		select {
		case r := <-w.start(ctx, time.Now()):
			switch {
			case r.err != nil:
				return r.err
			case r.tried:
				return nil
			}
		case <-ctx.Done():
			return giveUp(ctx.Err())
		case <-w.l.stop:
			return giveUp(ErrClosed)
		case <-give.C:
			return giveUp(fmt.Errorf("sluice: watch: %s: no answer from the file system within %v", w.path, w.stall))
		}
		select { // not settled yet: look again
		case <-time.After(min(w.o.Interval, w.o.Settle)):
		case <-ctx.Done():
			return giveUp(ctx.Err())
		case <-w.l.stop:
			return giveUp(ErrClosed)
		case <-give.C:
			return giveUp(fmt.Errorf("sluice: watch: %s: the file kept changing for %v: write it to a temporary file and rename that over it", w.path, w.stall))
		}
	}
}

// watch polls the file every Interval until ctx ends or the limiter
// closes, one step at a time, and logs what the steps find.
func (w *watcher) watch(ctx context.Context) {
	defer w.gone.Store(true)
	start := time.Now()
	t := time.NewTicker(w.o.Interval)
	defer t.Stop()
	var running <-chan stepResult // nil while no step runs
	var started time.Time
	stalled := false
	complaint := "" // the last unreadable file's error, logged once
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.l.stop:
			return
		case tick := <-t.C:
			// The tick on the Interval's grid: a late tick and an
			// early one are still an Interval apart, so that a file
			// unchanged over two polls has been so for a whole
			// Interval (a Settle of one).
			k := (tick.Sub(start) + w.o.Interval/2) / w.o.Interval
			now := start.Add(k * w.o.Interval)
			if running == nil {
				running, started, stalled = w.start(ctx, now), time.Now(), false
			} else if !stalled && time.Since(started) >= w.stall {
				stalled = true
				w.l.opts.Logger.Warn("sluice: configuration file does not answer; the rules in force stay until it does", "file", w.path, "waited", time.Since(started).Round(time.Second))
			}
		case r := <-running:
			running = nil
			switch {
			case r.err == nil:
				complaint = ""
			case r.unreadable:
				if msg := r.err.Error(); msg != complaint {
					complaint = msg
					w.l.opts.Logger.Warn("sluice: configuration file unreadable; the rules in force stay", "file", w.path, "err", r.err)
				}
			default:
				complaint = ""
				w.l.opts.Logger.Error("sluice: configuration not applied; the rules in force stay", "file", w.path, "err", r.err)
			}
		}
	}
}

// errMoved: the file changed while it was read.
var errMoved = errors.New("the file changed while it was read")

// step polls the file once, at now: it stats it, and reads and applies it
// if it has settled. It never blocks on open.
func (w *watcher) step(ctx context.Context, now time.Time) stepResult {
	fi, err := w.stat(w.path)
	if err != nil {
		w.seen = nil
		return stepResult{err: fmt.Errorf("sluice: watch: %w", err), unreadable: true}
	}
	if !fi.Mode().IsRegular() {
		w.seen = nil
		return stepResult{err: notRegular(w.path, fi), unreadable: true}
	}
	if w.done != nil && sameFile(fi, w.done) {
		w.seen = nil
		return stepResult{}
	}
	if w.seen == nil || !sameFile(fi, w.seen) {
		w.seen, w.since = fi, now
		renamed := w.done == nil || !os.SameFile(fi, w.done)
		if !renamed || now.Sub(fi.ModTime()) < w.o.Settle {
			return stepResult{} // just changed: wait for it to settle
		}
		// A new file, last written at least Settle ago: whole.
	} else if now.Sub(w.since) < w.o.Settle {
		return stepResult{}
	}
	data, err := readSettled(w.path, fi)
	if errors.Is(err, errMoved) {
		w.seen = nil
		return stepResult{}
	}
	if err != nil {
		return stepResult{err: fmt.Errorf("sluice: watch: %w", err), unreadable: true}
	}
	w.done, w.seen = fi, nil
	if w.content != nil && bytes.Equal(data, w.content) {
		return stepResult{tried: true}
	}
	c, err := policy.Load(bytes.NewReader(data))
	if err != nil {
		if ce, ok := err.(*policy.ConfigError); ok {
			ce.File = w.path
		}
		return stepResult{tried: true, err: err}
	}
	if ctx.Err() != nil || w.gone.Load() {
		return stepResult{tried: true, err: fmt.Errorf("sluice: watch: %s: no longer watched", w.path)}
	}
	if err := w.l.SetRules(c.Rules...); err != nil {
		return stepResult{tried: true, err: fmt.Errorf("sluice: %s: %w", w.path, err)}
	}
	w.content = data
	if w.o.Loaded != nil {
		w.o.Loaded(c)
	}
	return stepResult{tried: true}
}

// sameFile reports whether a and b are the same file with the same size
// and modification time.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

func notRegular(path string, fi os.FileInfo) error {
	return fmt.Errorf("sluice: watch: %s is not a regular file (%v): point WatchFile at the configuration file itself", path, fi.Mode().Type())
}

// readSettled reads the file at path that a stat found as fi: at most
// policy.MaxConfigSize+1 bytes (enough for policy.Load to refuse a larger
// one). It opens without blocking and reads only a regular file; it
// returns errMoved if the file is not fi any more, before or after the
// read.
func readSettled(path string, fi os.FileInfo) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ofi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !ofi.Mode().IsRegular() {
		return nil, notRegular(path, ofi)
	}
	if !sameFile(ofi, fi) {
		return nil, errMoved
	}
	data, err := io.ReadAll(io.LimitReader(f, policy.MaxConfigSize+1))
	if err != nil {
		return nil, err
	}
	after, err := os.Stat(path)
	if err != nil || !sameFile(after, fi) || int64(len(data)) != min(fi.Size(), policy.MaxConfigSize+1) {
		return nil, errMoved
	}
	return data, nil
}
