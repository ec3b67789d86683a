// Package policy defines rate-limit rules and validates them.
package policy

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Limits on rule fields. They keep every count, with room for concurrent
// additions, inside the 40-bit counters of package localcache, and every Redis
// key short and well formed.
const (
	// MaxLimit is the largest Limit a rule may have (2^32-1, about 4.3e9); count
	// larger quantities in coarser cost units.
	MaxLimit = 1<<32 - 1
	// MinWindow is the shortest Window a rule may have.
	MinWindow = time.Millisecond
	// MaxWindow is the longest Window a rule may have.
	MaxWindow = 366 * 24 * time.Hour
	// MaxPrecision is the largest number of sub-windows per Window.
	MaxPrecision = 64
	// DefaultPrecision is the number of sub-windows used when Precision is 0.
	DefaultPrecision = 10
	// MaxNameLength is the longest rule name, in bytes.
	MaxNameLength = 64
)

// Algorithm selects the counting math of a rule (see package window).
type Algorithm uint8

const (
	// SlidingWindow counts over the last Window with Precision sub-windows,
	// the oldest sub-window whole until it has entirely left the window: no
	// interval of length Window ever holds more than Limit. Saturated traffic
	// gets at least Precision/(Precision+1) of Limit per window, and a key
	// offered steadily at up to Limit·Precision/(Precision+1) per window
	// (0.9·Limit at the default precision) is never denied. It is the
	// default.
	SlidingWindow Algorithm = iota
	// FixedWindow counts per aligned window [nW, (n+1)W); up to 2·Limit can pass
	// around a window boundary.
	FixedWindow
	// WeightedWindow is the sliding-window estimate Cloudflare describes:
	// as SlidingWindow, but the oldest sub-window counts only by the part of
	// it still inside the window, as if its requests were spread evenly. On
	// evenly spread traffic it is within about Limit/Precision of exact;
	// a burst that fills the limit at once (a cold start, a retry storm)
	// gets up to that much more through in a real interval of Window, and
	// an adversary nearly 2·Limit.
	WeightedWindow
)

// String returns the algorithm's name as used in policy files.
func (a Algorithm) String() string {
	switch a {
	case SlidingWindow:
		return "sliding"
	case FixedWindow:
		return "fixed"
	case WeightedWindow:
		return "weighted"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Mode selects where a rule's decisions are made.
type Mode uint8

const (
	// ModeDefault is Eventual when the limiter has a store and Local otherwise.
	ModeDefault Mode = iota
	// Eventual decides locally and converges through the store in the
	// background, within the limiter's error budget.
	Eventual
	// Local decides in this process only and never touches the store.
	Local
	// Strict decides every check with one atomic round trip to the store: exact,
	// for low-rate limits such as login attempts.
	Strict
)

// String returns the mode's name as used in policy files.
func (m Mode) String() string {
	switch m {
	case ModeDefault:
		return "default"
	case Eventual:
		return "eventual"
	case Local:
		return "local"
	case Strict:
		return "strict"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Rule is one rate limit: at most Limit requests (or cost units) per Window,
// per key.
type Rule struct {
	// Name identifies the rule in Allow calls and is part of the Redis key:
	// 1 to MaxNameLength bytes of [A-Za-z0-9_.-]. Unique within a limiter.
	Name string
	// Limit is the number of requests (or cost units) allowed per Window, per
	// key: 1 to MaxLimit.
	Limit int64
	// Window is the length of the window: MinWindow to MaxWindow.
	Window time.Duration
	// Algorithm is the counting math; default SlidingWindow.
	Algorithm Algorithm
	// Precision is the number of sub-windows of a SlidingWindow or
	// WeightedWindow; default DefaultPrecision. A SlidingWindow never
	// over-admits and gives up at most 1/(Precision+1) of the limit to
	// saturated traffic; a WeightedWindow (with 1, the classic
	// current-plus-weighted-previous window) errs by about Limit/Precision
	// either way on spread traffic (see package window).
	// Window must split into Precision sub-windows of whole microseconds.
	// Ignored by FixedWindow.
	Precision int
	// Mode is where decisions are made; default ModeDefault.
	Mode Mode
}

// ErrInvalidRule is wrapped by every error Validate returns.
var ErrInvalidRule = errors.New("invalid rule")

// Buckets returns the number of sub-windows the rule counts with: 1 for a
// FixedWindow, Precision (or DefaultPrecision) for a SlidingWindow or a
// WeightedWindow.
func (r Rule) Buckets() int {
	if r.Algorithm == FixedWindow {
		return 1
	}
	if r.Precision == 0 {
		return DefaultPrecision
	}
	return r.Precision
}

// SubWindow returns the length of one sub-window: Window / Buckets.
func (r Rule) SubWindow() time.Duration {
	return r.Window / time.Duration(r.Buckets())
}

// Validate reports what is wrong with the rule, and how to fix it, or nil.
func (r Rule) Validate() error {
	if err := ValidateName(r.Name); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidRule, r.Name, fmt.Sprintf(format, args...))
	}
	if r.Limit < 1 || r.Limit > MaxLimit {
		return bad("Limit %d is out of range: it must be between 1 and %d", r.Limit, int64(MaxLimit))
	}
	if r.Window < MinWindow || r.Window > MaxWindow {
		return bad("Window %v is out of range: it must be between %v and %v", r.Window, MinWindow, MaxWindow)
	}
	switch r.Algorithm {
	case SlidingWindow, FixedWindow, WeightedWindow:
	default:
		return bad("unknown Algorithm %d: use policy.SlidingWindow, policy.FixedWindow or policy.WeightedWindow", r.Algorithm)
	}
	switch r.Mode {
	case ModeDefault, Eventual, Local, Strict:
	default:
		return bad("unknown Mode %d: use policy.Eventual, policy.Local or policy.Strict", r.Mode)
	}
	if r.Algorithm != FixedWindow {
		if r.Precision < 0 || r.Precision > MaxPrecision {
			return bad("Precision %d is out of range: it must be between 1 and %d (0 means %d)", r.Precision, MaxPrecision, DefaultPrecision)
		}
		b := time.Duration(r.Buckets())
		if r.Window%(b*time.Microsecond) != 0 {
			return bad("Window %v does not split into %d sub-windows of whole microseconds: pick a Precision that divides it", r.Window, b)
		}
	} else if r.Window%time.Microsecond != 0 {
		return bad("Window %v is not a whole number of microseconds: round it, for example to %v", r.Window, r.Window.Truncate(time.Microsecond))
	}
	return nil
}

// ValidateName reports whether s can be a rule name: 1 to MaxNameLength bytes
// of ASCII letters, digits, '_', '.' and '-'. These cannot break the Redis key
// layout (no ':', '{', '}' or spaces).
func ValidateName(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty Name: every rule needs a unique name", ErrInvalidRule)
	}
	if len(s) > MaxNameLength {
		return fmt.Errorf("%w %.20q...: Name is %d bytes long; the maximum is %d", ErrInvalidRule, s, len(s), MaxNameLength)
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return fmt.Errorf("%w %q: Name has %s at byte %d; use only letters, digits, '_', '.' and '-'", ErrInvalidRule, s, badChar(s[i:]), i)
		}
	}
	return nil
}

// badChar describes the character that s starts with: quoted, decoded as
// UTF-8 if it is not ASCII, or as a byte if it is not valid UTF-8.
func badChar(s string) string {
	if s[0] < utf8.RuneSelf {
		return fmt.Sprintf("%q", s[0])
	}
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && size == 1 {
		return fmt.Sprintf("byte %#x", s[0])
	}
	return fmt.Sprintf("%q", r)
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}
