package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// storeLog receives go-redis's own log lines (installed with redis.SetLogger;
// go-redis logs, for example, "connection pool: failed to dial" for every
// failed dial while the store is down, as in the -outage demo). It never
// writes to the terminal: it counts the lines and, when a file is set (-out),
// appends them there; the report says how many there were and where they
// went.
type storeLog struct {
	mu    sync.Mutex
	path  string   // where to write the lines; "" = count only
	f     *os.File // opened at the first line
	err   error    // opening or writing the file failed
	lines int64
	dials int64  // lines about failed dials
	first string // the first line since the last mark
}

// dialFailure is what go-redis's connection pool logs when a dial fails.
const dialFailure = "failed to dial"

// Printf implements go-redis's logger (internal.Logging).
func (l *storeLog) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimRight(fmt.Sprintf(format, v...), "\n")
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines++
	if strings.Contains(msg, dialFailure) {
		l.dials++
	}
	if l.first == "" {
		l.first = msg
	}
	if l.path == "" || l.err != nil {
		return
	}
	if l.f == nil {
		if l.f, l.err = os.Create(l.path); l.err != nil {
			return
		}
	}
	_, l.err = fmt.Fprintf(l.f, "%s %s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), msg)
}

// reset starts a run: no lines yet, written to path if it is not "".
func (l *storeLog) reset(path string) {
	l.close()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.path, l.err, l.lines, l.dials, l.first = path, nil, 0, 0, ""
}

// close closes the file, if one was opened; later lines are only counted.
func (l *storeLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		if err := l.f.Close(); l.err == nil {
			l.err = err
		}
		l.f = nil
	}
	l.path = ""
}

// storeLogCount is a snapshot of a storeLog's counters.
type storeLogCount struct {
	lines, dials int64
}

// mark returns the counters so far and forgets the first line: note(mark())
// later tells what was logged in between.
func (l *storeLog) mark() storeLogCount {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.first = ""
	return storeLogCount{l.lines, l.dials}
}

// note says what go-redis logged since the mark from, and where the lines
// went; "" if it logged nothing.
func (l *storeLog) note(from storeLogCount) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines, dials := l.lines-from.lines, l.dials-from.dials
	if lines == 0 {
		return ""
	}
	what := fmt.Sprintf("%d lines", lines)
	if lines == 1 {
		what = "1 line"
	}
	if dials > 0 {
		what += fmt.Sprintf(" (%d of them %q: the store was unreachable)", dials, dialFailure)
	}
	where := "counted, not shown (-out DIR keeps them in DIR/redis.log)"
	switch {
	case l.path != "" && l.err != nil:
		where = fmt.Sprintf("counted, not shown (writing %s failed: %v)", l.path, l.err)
	case l.path != "":
		where = "written to " + l.path + ", not shown"
	}
	return fmt.Sprintf("go-redis logged %s: %s; first: %q", what, where, l.first)
}
