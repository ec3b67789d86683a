package policy

import "fmt"

// FailureMode says how checks that need the store are decided while it is
// unreachable or too slow. It is the one enum for failure handling: the
// limiter's option, the engines and the per-key state all use it.
type FailureMode uint8

const (
	// FailLocal enforces Limit/N̂ per instance locally (N̂ as last seen), keeps
	// the counts, and pushes them when the store returns. The default.
	FailLocal FailureMode = iota
	// FailOpen admits every check (still counting it, to push later).
	FailOpen
	// FailClosed denies every check that needs the store, with an error.
	FailClosed
)

// String returns the mode's name.
func (m FailureMode) String() string {
	switch m {
	case FailLocal:
		return "fail-local"
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	}
	return fmt.Sprintf("FailureMode(%d)", uint8(m))
}

// Valid reports whether m is one of FailLocal, FailOpen and FailClosed.
func (m FailureMode) Valid() bool { return m <= FailClosed }
