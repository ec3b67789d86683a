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
	// maxNameLength is the longest rule name, in bytes.
	maxNameLength = 64
	// MaxLogLimit is the largest Limit of a SlidingLog rule. The log keeps
	// one 8-byte timestamp per unit in the window, per key: at this bound a
	// key at its limit holds 8 KiB, so a million keys at their limits (the
	// default key bound) would hold 8 GiB. Keys grow their logs only as
	// far as they fill them, but a key flood can fill them: lower
	// Options.MaxKeys for such rules. Higher limits are what the counting
	// algorithms are for.
	MaxLogLimit = 1024
	// minInterval is the shortest emission interval Window/Limit of a
	// TokenBucket or GCRA rule: the interval is rounded to the nanosecond,
	// which at 1µs changes the rate by at most 0.05%.
	minInterval = time.Microsecond
	// minWarmUpInterval is the shortest emission interval of a rule with a
	// WarmUp: its state runs on Guava's µs clock and each admission's cost
	// is truncated to the µs, as in Guava, so at 1ms the rate is off by at
	// most 0.1%.
	minWarmUpInterval = time.Millisecond
	// MaxWarmUpIntervals bounds WarmUp/Interval, the cold permits a key of a
	// warm-up rule stores: kept in 20 bits, they are then exact to 1/16 of
	// a permit (see localcache.WarmTable).
	MaxWarmUpIntervals = 1 << 16
	// maxWarmUpDebt bounds Burst·Interval for a rule with a WarmUp: a key's
	// debt (at most three times that, when cold) must fit the packed state
	// of localcache.WarmTable.
	maxWarmUpDebt = 24 * time.Hour
	// MaxStrictTolerance is the largest Burst·Interval of a TokenBucket or
	// GCRA rule in Mode Strict: the store's script keeps the debt in Lua
	// numbers, doubles exact to 2^53 ns; this bound (2^52 ns, about 52
	// days) leaves room for a cost on top.
	MaxStrictTolerance = time.Duration(1 << 52)
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
	// TokenBucket refills Limit per Window continuously (one unit every
	// Interval, Window/Limit) and holds at most Burst: a full bucket admits
	// Burst at once. Its keys are kept on GCRA's state (package window
	// proves the two admit the same costs). Every mode: Local, Strict (each
	// check decided by one store script) and Eventual (the store leases
	// each instance a few units at a time: window.SplitBucket).
	TokenBucket
	// GCRA is the generic cell rate algorithm: the admission set of
	// TokenBucket, one timestamp of state per key, an exact RetryAfter.
	// Every mode, as TokenBucket.
	GCRA
	// SlidingLog is exact: it keeps one timestamp per admitted unit in the
	// window, per key, so its Limit is at most MaxLogLimit. Mode Local or
	// Strict (the log kept in the store); not Eventual, which would not be
	// exact.
	SlidingLog
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
	case TokenBucket:
		return "token-bucket"
	case GCRA:
		return "gcra"
	case SlidingLog:
		return "sliding-log"
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
	// 1 to 64 bytes of [A-Za-z0-9_.-]. Unique within a limiter.
	Name string
	// Limit is the number of requests (or cost units) allowed per Window, per
	// key: 1 to MaxLimit.
	Limit int64
	// Window is the length of the window: MinWindow to MaxWindow; 0 for a
	// calendar quota (Period), whose length the calendar sets.
	Window time.Duration
	// Period, if set, makes the rule a calendar quota: Limit per calendar
	// day, week or month in TimeZone, counted as one fixed window per
	// period (Algorithm FixedWindow, no Window); a Decision's ResetAfter
	// and RetryAfter run to the end of the period. Every Mode.
	Period Period
	// TimeZone is the IANA name of the time zone a Period is reckoned in,
	// such as "Europe/Berlin"; empty means UTC. Only with Period.
	TimeZone string
	// Algorithm is the counting math; default SlidingWindow.
	Algorithm Algorithm
	// Precision is the number of sub-windows of a SlidingWindow or
	// WeightedWindow; default DefaultPrecision. A SlidingWindow never
	// over-admits and gives up at most 1/(Precision+1) of the limit to
	// saturated traffic; a WeightedWindow (with 1, the classic
	// current-plus-weighted-previous window) errs by about Limit/Precision
	// either way on spread traffic (see package window).
	// Window must split into Precision sub-windows of whole microseconds.
	// Ignored by FixedWindow; refused by the other algorithms.
	Precision int
	// Burst is the capacity of a TokenBucket or GCRA: the most a key admits
	// at once after idling; 1 to MaxLimit, default Limit. It also bounds a
	// check's cost. Refused by the other algorithms.
	Burst int64
	// WarmUp, for a TokenBucket or GCRA, makes an idle key go cold: its rate
	// then ramps up to Limit per Window over WarmUp of saturated use, as in
	// Guava's SmoothWarmingUp (cold factor 3: a cold key admits one unit
	// per 3·Interval and about Burst/3 at once; see window.WarmUp). It needs
	// an Interval of at least 1ms and a Burst·Interval of at most 24 hours.
	// 0 (the default) means no warm-up. Refused by the other algorithms.
	WarmUp time.Duration
	// Mode is where decisions are made; default ModeDefault.
	Mode Mode
	// Soft is soft throttling: the rule admits up to Limit·(1+Soft) (and,
	// for a TokenBucket or GCRA, refills and holds that much more), while
	// the Decision's Limit and Remaining still speak of Limit: a check in
	// the soft band is Allowed with Remaining 0. 0 (the default) means no
	// soft band; negative, NaN, infinite values and values above 10 are
	// refused.
	Soft float64
	// Ceiling makes the rule elastic: a key may pass its Limit, up to
	// Ceiling per Window, while the rule named by Capacity (a shared
	// capacity, for example the whole service's rate) has room; when it has
	// none, every key is held to its own Limit. The Decision speaks of
	// Limit, as for Soft. 0 (the default) means no elasticity; with it,
	// Capacity is required and Ceiling must be at least Limit. For the
	// counting algorithms (the windows and SlidingLog), not with Soft.
	Ceiling int64
	// Capacity names the shared capacity rule of an elastic rule (see
	// Ceiling): its Limit and Window are the capacity. The limiter counts
	// every admission of the elastic rules on a meter of it (see
	// sluice.MeterSuffix), not on the rule itself.
	Capacity string
	// Shadow makes the rule a dry run: it decides and counts as usual but
	// never denies. A check it would have denied is Allowed with a
	// RetryAfter above 0 (see Decision.Shadowed).
	Shadow bool
	// Deny makes the rule deny every check (envoy ratelimit's
	// requests_per_unit: 0); Limit must then be 0, and RetryAfter is the
	// Window.
	Deny bool
	// Overrides give named keys their own limit: a higher tier, an
	// allow-listed service, a blocked client (see Override). A key in no
	// override gets the rule's Limit. At most 2^20 keys, all tiers together.
	Overrides []Override
	// InFlight makes the rule a concurrency limit instead of a rate: at
	// most Limit slots held at once per key, taken by Limiter.Acquire and
	// given back by Slot.Release. It has no Window; only Name, Limit and
	// Mode apply (Local: this process; ModeDefault or Strict: across the
	// fleet when the limiter has a store).
	InFlight bool
}

// ErrInvalidRule is wrapped by every error Validate returns.
var ErrInvalidRule = errors.New("invalid rule")

// Interval returns the emission interval of a TokenBucket or GCRA rule,
// Window/Limit rounded to the nearest nanosecond: the bucket gains one unit
// per Interval; it must be at least 1µs. For the other algorithms it is the
// same quotient, the mean spacing of Limit units over the Window.
func (r Rule) Interval() time.Duration {
	if r.Limit < 1 {
		return 0
	}
	return time.Duration((int64(r.WindowLength()) + r.Limit/2) / r.Limit)
}

// MaxCost returns the largest cost a check of the rule can ever be admitted
// with: Burst (default Limit) for a TokenBucket or GCRA, Limit otherwise.
func (r Rule) MaxCost() int64 {
	if (r.Algorithm == TokenBucket || r.Algorithm == GCRA) && r.Burst != 0 {
		return r.Burst
	}
	return r.Limit
}

// isBucket reports whether the algorithm is TokenBucket or GCRA, the two
// that take Burst and WarmUp.
func (a Algorithm) isBucket() bool { return a == TokenBucket || a == GCRA }

// Validate reports what is wrong with the rule, and how to fix it, or nil.
func (r Rule) Validate() error {
	if err := ValidateName(r.Name); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidRule, r.Name, fmt.Sprintf(format, args...))
	}
	if err := r.validateCalendar(bad); err != nil {
		return err
	}
	if r.InFlight {
		return r.validateInFlight(bad)
	}
	if r.Deny {
		return r.validateDeny(bad)
	}
	if r.Limit < 1 || r.Limit > MaxLimit {
		return bad("Limit %d is out of range: it must be between 1 and %d", r.Limit, int64(MaxLimit))
	}
	if (r.Window < MinWindow || r.Window > MaxWindow) && !r.calendar() {
		return bad("Window %v is out of range: it must be between %v and %v", r.Window, MinWindow, MaxWindow)
	}
	switch r.Algorithm {
	case SlidingWindow, FixedWindow, WeightedWindow, TokenBucket, GCRA, SlidingLog:
	default:
		return bad("unknown Algorithm %d: use policy.SlidingWindow, WeightedWindow, FixedWindow, TokenBucket, GCRA or SlidingLog", uint8(r.Algorithm))
	}
	switch r.Mode {
	case ModeDefault, Eventual, Local, Strict:
	default:
		return bad("unknown Mode %d: use policy.Eventual, policy.Local or policy.Strict", r.Mode)
	}
	if err := r.validateAlgorithm(bad); err != nil {
		return err
	}
	if err := r.validateSoft(bad); err != nil {
		return err
	}
	if err := r.validateElastic(bad); err != nil {
		return err
	}
	if r.Algorithm == SlidingWindow || r.Algorithm == WeightedWindow {
		if r.Precision < 0 || r.Precision > MaxPrecision {
			return bad("Precision %d is out of range: it must be between 1 and %d (0 means %d)", r.Precision, MaxPrecision, DefaultPrecision)
		}
		b := time.Duration(r.precision())
		if r.Window%(b*time.Microsecond) != 0 {
			return bad("Window %v does not split into %d sub-windows of whole microseconds: pick a Precision that divides it", r.Window, b)
		}
	} else if r.Window%time.Microsecond != 0 {
		return bad("Window %v is not a whole number of microseconds: round it, for example to %v", r.Window, r.Window.Truncate(time.Microsecond))
	}
	return r.validateOverrides(bad)
}

// precision returns the number of sub-windows a SlidingWindow or a
// WeightedWindow counts with: Precision, or DefaultPrecision for 0. The
// engines read the same from internal/rulegeo's Buckets (which imports
// policy, so cannot be called here): change the two together.
func (r Rule) precision() int {
	if r.Precision == 0 {
		return DefaultPrecision
	}
	return r.Precision
}

// validateAlgorithm checks the fields that belong to some algorithms only:
// Burst and WarmUp (TokenBucket, GCRA), Precision (the windows), and the
// bounds of each algorithm's state.
func (r Rule) validateAlgorithm(bad func(string, ...any) error) error {
	a := r.Algorithm
	if !a.isBucket() {
		if r.Burst != 0 {
			return bad("Burst %d is set on a %v rule: only TokenBucket and GCRA have a capacity; remove Burst, or use one of them", r.Burst, a)
		}
		if r.WarmUp != 0 {
			return bad("WarmUp %v is set on a %v rule: only TokenBucket and GCRA warm up; remove WarmUp, or use one of them", r.WarmUp, a)
		}
	}
	if a != SlidingWindow && a != WeightedWindow && a != FixedWindow && r.Precision != 0 {
		return bad("Precision %d is set on a %v rule: only SlidingWindow and WeightedWindow have sub-windows; remove Precision", r.Precision, a)
	}
	if err := r.validateMode(bad); err != nil {
		return err
	}
	if a == SlidingLog && r.Limit > MaxLogLimit {
		return bad("Limit %d is too large for a SlidingLog, which keeps one timestamp per unit per key: the most is %d; use SlidingWindow or GCRA for higher limits", r.Limit, MaxLogLimit)
	}
	if !a.isBucket() {
		return nil
	}
	iv := r.Interval()
	if iv < minInterval {
		return bad("Window/Limit is %v: a %v emits one unit per interval, which must be at least %v; count in coarser units, or lengthen the Window", iv, a, minInterval)
	}
	if r.Burst < 0 || r.Burst > MaxLimit {
		return bad("Burst %d is out of range: it must be between 1 and %d (0 means Limit)", r.Burst, int64(MaxLimit))
	}
	burst := r.MaxCost()
	if burst > int64(MaxWindow/iv) {
		return bad("Burst %d takes %d intervals of %v to refill, longer than %v: lower Burst or raise the rate", burst, burst, iv, MaxWindow)
	}
	if (r.Mode == Strict || r.Mode == Eventual) && time.Duration(burst) > MaxStrictTolerance/iv {
		return bad("Burst %d takes %v to refill; in a shared mode (Strict, Eventual) the most is %v (the store computes in doubles): lower Burst or raise the rate", burst, time.Duration(burst)*iv, MaxStrictTolerance)
	}
	if r.WarmUp < 0 {
		return bad("WarmUp %v is negative: use 0 for no warm-up, or a positive duration", r.WarmUp)
	}
	if r.WarmUp == 0 {
		return nil
	}
	switch {
	case iv < minWarmUpInterval:
		return bad("Window/Limit is %v: with a WarmUp the interval must be at least %v (the warm-up runs on a µs clock); lower the Limit, lengthen the Window, or remove WarmUp", iv, minWarmUpInterval)
	case r.WarmUp < iv:
		return bad("WarmUp %v is shorter than one interval (%v): nothing to ramp; lengthen it or remove it", r.WarmUp, iv)
	case r.WarmUp/iv > MaxWarmUpIntervals:
		return bad("WarmUp %v spans %d intervals of %v; the most is %d: shorten WarmUp, or lower the Limit", r.WarmUp, r.WarmUp/iv, iv, MaxWarmUpIntervals)
	case time.Duration(burst) > maxWarmUpDebt/iv:
		return bad("Burst %d takes %v to refill; with a WarmUp the most is %v: lower Burst or raise the rate", burst, time.Duration(burst)*iv, maxWarmUpDebt)
	}
	return nil
}

// validateMode refuses the modes an algorithm does not have: a SlidingLog
// runs Local or Strict, not Eventual, and a WarmUp runs Local only.
func (r Rule) validateMode(bad func(string, ...any) error) error {
	switch a := r.Algorithm; {
	case a == SlidingLog && r.Mode == Eventual:
		return bad("Mode Eventual is refused for a SlidingLog: the log is exact by definition, and decided on counts a sync old it would not be; use Mode policy.Strict to share it across the fleet (one store call per check), or policy.Local")
	case r.WarmUp != 0 && (r.Mode == Strict || r.Mode == Eventual):
		return bad("WarmUp %v with Mode %s: a warm-up is decided in this process only (its state is Guava's, per instance); use Mode policy.Local, or remove WarmUp", r.WarmUp, map[Mode]string{Strict: "Strict", Eventual: "Eventual"}[r.Mode])
	}
	return nil
}

// ValidateName reports whether s can be a rule name: 1 to 64 bytes of
// ASCII letters, digits, '_', '.' and '-'. These cannot break the Redis key
// layout (no ':', '{', '}' or spaces).
func ValidateName(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty Name: every rule needs a unique name", ErrInvalidRule)
	}
	if len(s) > maxNameLength {
		return fmt.Errorf("%w %.20q...: Name is %d bytes long; the maximum is %d", ErrInvalidRule, s, len(s), maxNameLength)
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
