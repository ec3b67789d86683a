package sluice

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// DefaultWatchInterval is the polling interval of WatchOptions that leave
// Interval zero.
const DefaultWatchInterval = time.Second

// WatchOptions configures WatchFile.
type WatchOptions struct {
	// Interval is how often the file is checked for a change; default
	// DefaultWatchInterval. A check is one stat; the file is read only
	// when its size or modification time changed.
	Interval time.Duration
	// Loaded, if set, is called with every configuration applied, the
	// first one included, from the watching goroutine: keep the latest
	// for Config.Match.
	Loaded func(policy.Config)
}

// WatchFile applies the rules of the configuration file at path (see
// policy.LoadFile) with SetRules, and then keeps them in step with the
// file: it polls it every Interval and applies it again when its content
// changed. A change that does not load or that SetRules refuses keeps the
// rules in force and is logged (Options.Logger, at Warn) with the file's
// line and field; the next change is tried again. Every applied change is
// logged by SetRules.
//
// The first load is synchronous: its error is returned and nothing is
// watched. After it, watching runs in its own goroutine until ctx ends or
// the limiter is closed. Polling needs no file-system notifications, so it
// also follows a file replaced by a rename (as editors and Kubernetes
// ConfigMaps do).
func (l *Limiter) WatchFile(ctx context.Context, path string, o WatchOptions) error {
	if o.Interval <= 0 {
		o.Interval = DefaultWatchInterval
	}
	w := &watcher{l: l, path: path, o: o}
	if err := w.reload(); err != nil {
		return err
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		t := time.NewTicker(o.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.stop:
				return
			case <-t.C:
				if w.changed() {
					if err := w.reload(); err != nil {
						l.opts.Logger.Warn("sluice: configuration not applied; the rules in force stay", "file", path, "err", err)
					}
				}
			}
		}
	}()
	return nil
}

type watcher struct {
	l       *Limiter
	path    string
	o       WatchOptions
	size    int64
	mod     time.Time
	content []byte // as last read, applied or not
}

// changed reports whether the file's size or modification time differ
// from the last read.
func (w *watcher) changed() bool {
	fi, err := os.Stat(w.path)
	if err != nil {
		if w.size != -1 {
			w.l.opts.Logger.Warn("sluice: configuration file unreadable; the rules in force stay", "file", w.path, "err", err)
			w.size = -1
		}
		return false
	}
	return fi.Size() != w.size || !fi.ModTime().Equal(w.mod)
}

// reload reads the file and, if its content changed, loads and applies it.
func (w *watcher) reload() error {
	fi, err := os.Stat(w.path)
	if err != nil {
		return fmt.Errorf("sluice: watch: %w", err)
	}
	w.size, w.mod = fi.Size(), fi.ModTime()
	data, err := readBounded(w.path)
	if err != nil {
		return fmt.Errorf("sluice: watch: %w", err)
	}
	if w.content != nil && bytes.Equal(data, w.content) {
		return nil
	}
	w.content = data
	c, err := policy.Load(bytes.NewReader(data))
	if err != nil {
		if ce, ok := err.(*policy.ConfigError); ok {
			ce.File = w.path
		}
		return err
	}
	if err := w.l.SetRules(c.Rules...); err != nil {
		return fmt.Errorf("sluice: %s: %w", w.path, err)
	}
	if w.o.Loaded != nil {
		w.o.Loaded(c)
	}
	return nil
}

// readBounded reads at most policy.MaxConfigSize+1 bytes of the file:
// enough for policy.Load to refuse a larger one.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, policy.MaxConfigSize+1))
}
