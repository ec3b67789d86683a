// Package leakcheck fails a test binary that leaves goroutines behind.
//
// It is a small stand-in for go.uber.org/goleak, kept here so that the
// library module needs no test-only dependency for it: it reads every
// goroutine's stack with runtime.Stack, drops the goroutines the testing
// package and the runtime keep for themselves, and retries for a moment so
// that goroutines on their way out are not reported.
package leakcheck

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// maxSleep is goleak's default: the looks back off exponentially from
	// 1µs to at most 100ms between two.
	maxSleep = 100 * time.Millisecond
	// patience is how long goroutines on their way out are waited for.
	// goleak's 20 looks make about half a second; go-redis's background
	// dial retry, left running by a client whose server was killed, sleeps
	// a second between dials and sees its pool closed only after that
	// sleep, so the wait must outlast it (a CI run reported one).
	patience = 2 * time.Second
)

// goroutine is one goroutine as runtime.Stack prints it.
type goroutine struct {
	id    int
	state string   // e.g. "chan receive" or "select, 2 minutes"
	funcs []string // innermost first, without the "created by" function
	stack string   // the whole trace, header included
}

// top returns the innermost function of the goroutine's stack, or "".
func (g goroutine) top() string {
	if len(g.funcs) == 0 {
		return ""
	}
	return g.funcs[0]
}

// has reports whether fn is on the goroutine's stack.
func (g goroutine) has(fn string) bool {
	return slices.Contains(g.funcs, fn)
}

// VerifyTestMain runs the tests of m and, when they pass, fails the test
// binary (exit status 1, the leaked stacks on stderr) if goroutines other
// than the caller's and those of the testing package and the runtime are
// still running. Use it as a package's TestMain:
//
//	func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
func VerifyTestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := Find(); err != nil {
			fmt.Fprintf(os.Stderr, "leakcheck: the tests passed but %v", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Find returns an error listing the stacks of the goroutines other than the
// caller's that are not the testing package's or the runtime's own, or nil
// if there are none. While there are any it looks again, with a short
// backoff, for up to patience, to let goroutines on their way out finish.
func Find() error { return findWithin(patience) }

// findWithin is Find, looking again for up to p.
func findWithin(p time.Duration) error {
	leaked := find(current(), p)
	if len(leaked) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d goroutines leaked:\n\n", len(leaked))
	for _, g := range leaked {
		b.WriteString(g.stack)
		b.WriteString("\n")
	}
	return errors.New(b.String())
}

// find returns the goroutines leaked, once none is left or after p. The
// goroutine self is not one.
func find(self int, p time.Duration) []goroutine {
	var leaked []goroutine
	deadline := time.Now().Add(p)
	for i := 0; ; i++ {
		leaked = leaked[:0]
		for _, g := range parse(stacks(true)) {
			if g.id != self && !ignored(g) {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(min(time.Microsecond<<min(i, 30), maxSleep))
	}
}

// ignored reports whether g belongs to the testing package or the runtime,
// with the same rules as goleak's default filters.
func ignored(g goroutine) bool {
	switch g.top() {
	case "testing.RunTests", "testing.(*T).Run", "testing.(*T).Parallel", "testing.runFuzzing", "testing.runFuzzTests":
		// The testing package's runners, waiting for their tests.
		return strings.HasPrefix(g.state, "chan receive")
	case "os/signal.signal_recv", "os/signal.loop":
		// Started by importing os/signal.
		return true
	}
	switch {
	case g.has("runtime.ensureSigM"): // started by signal.Notify
		return true
	case g.has("runtime.ReadTrace"): // execution tracer
		return true
	case g.has("runtime.goexit") && strings.HasPrefix(g.state, "syscall"): // cgo callbacks
		return true
	}
	return false
}

// current returns the calling goroutine's ID.
func current() int {
	gs := parse(stacks(false))
	if len(gs) == 0 {
		panic("leakcheck: cannot read the current goroutine's stack")
	}
	return gs[0].id
}

// stacks returns runtime.Stack's output, growing the buffer until it fits.
func stacks(all bool) string {
	for n := 64 << 10; ; n *= 2 {
		buf := make([]byte, n)
		if m := runtime.Stack(buf, all); m < n {
			return string(buf[:m])
		}
	}
}

// parse splits the output of runtime.Stack into goroutines. A trace is a
// header ("goroutine 7 [chan receive, 2 minutes]:") followed by pairs of
// lines, a function call and its tab-indented file position, and ends with
// an optional "created by" pair and a blank line.
func parse(trace string) []goroutine {
	var out []goroutine
	for block := range strings.SplitSeq(trace, "\n\n") {
		block = strings.Trim(block, "\n")
		header, body, _ := strings.Cut(block, "\n")
		rest, ok := strings.CutPrefix(header, "goroutine ")
		if !ok {
			continue
		}
		idText, stateText, _ := strings.Cut(rest, " ")
		id, err := strconv.Atoi(idText)
		if err != nil {
			continue
		}
		g := goroutine{id: id, stack: block + "\n"}
		if i, j := strings.IndexByte(stateText, '['), strings.LastIndexByte(stateText, ']'); i >= 0 && j > i {
			g.state = stateText[i+1 : j]
		}
		for line := range strings.SplitSeq(body, "\n") {
			if line == "" || strings.HasPrefix(line, "\t") {
				continue // a file position
			}
			if strings.HasPrefix(line, "created by ") {
				break // the creator is on another goroutine's stack
			}
			if strings.HasPrefix(line, "...") {
				continue // "...additional frames elided..."
			}
			if i := strings.LastIndexByte(line, '('); i > 0 {
				line = line[:i]
			}
			g.funcs = append(g.funcs, line)
		}
		out = append(out, g)
	}
	return out
}
