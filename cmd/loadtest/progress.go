package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress reports a run's progress: a bar redrawn in place on a terminal,
// otherwise one plain line per finished scenario, so that a log or a file
// gets no carriage-return frames.
type progress interface {
	// begin starts scenario i (from 0) of n, which will run for d.
	begin(i, n int, name string, d time.Duration)
	// at reports the fraction f of scenario i's duration done; it may be
	// called from another goroutine, even after end.
	at(i int, f float64)
	// end reports the current scenario finished: its checks and how long
	// it took, analysis included.
	end(checks int64, took time.Duration)
	// finish ends the output (the bar at 100 %).
	finish()
	// abort ends the output after a failure.
	abort()
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// newProgress returns the progress output for scenarios lasting total in
// all, on w: nothing if quiet, a bar if tty, plain lines otherwise.
func newProgress(w io.Writer, quiet, tty bool, total time.Duration) progress {
	switch {
	case quiet:
		return noProgress{}
	case tty:
		return newBarProgress(w, total)
	}
	return &lineProgress{w: w}
}

// noProgress prints nothing.
type noProgress struct{}

func (noProgress) begin(int, int, string, time.Duration) {}
func (noProgress) at(int, float64)                       {}
func (noProgress) end(int64, time.Duration)              {}
func (noProgress) finish()                               {}
func (noProgress) abort()                                {}

// lineProgress prints one line per finished scenario.
type lineProgress struct {
	w    io.Writer
	i, n int
	name string
}

func (p *lineProgress) begin(i, n int, name string, _ time.Duration) {
	p.i, p.n, p.name = i, n, name
}

func (p *lineProgress) at(int, float64) {}

func (p *lineProgress) end(checks int64, took time.Duration) {
	fmt.Fprintf(p.w, "loadtest: [%d/%d] %s done: %d checks in %v\n", p.i+1, p.n, p.name, checks, took.Round(100*time.Millisecond))
}

func (p *lineProgress) finish() {}
func (p *lineProgress) abort()  {}

// barProgress draws a progress bar over the run's total scenario time, in
// milliseconds.
type barProgress struct {
	bar       *progressbar.ProgressBar
	mu        sync.Mutex
	i         int           // the current scenario; -1 between two
	base, cur time.Duration // scenario time done before the current one; its length
}

func newBarProgress(w io.Writer, total time.Duration) *barProgress {
	return &barProgress{i: -1, bar: progressbar.NewOptions64(max(total.Milliseconds(), 1),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionSetPredictTime(true),
		// The bar stays, at 100 %, on its own line.
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)}
}

func (p *barProgress) begin(i, n int, name string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.i, p.cur = i, d
	p.bar.Describe(fmt.Sprintf("[%d/%d] %-10s", i+1, n, name))
}

func (p *barProgress) at(i int, f float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i != p.i {
		return // a late report of a scenario already ended
	}
	_ = p.bar.Set64((p.base + time.Duration(f*float64(p.cur))).Milliseconds())
}

func (p *barProgress) end(int64, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.base += p.cur
	p.i = -1
	_ = p.bar.Set64(p.base.Milliseconds())
}

func (p *barProgress) finish() { _ = p.bar.Finish() }
func (p *barProgress) abort()  { _ = p.bar.Clear() }
