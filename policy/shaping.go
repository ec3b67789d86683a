package policy

import "math"

// MaxSoft is the largest Soft a rule may have: a soft band of ten times the
// limit is already no limit worth the name.
const MaxSoft = 10

// SoftLimit returns the most the rule admits per Window with its soft band:
// ⌊Limit·(1+Soft)⌋, and Limit without one.
func (r Rule) SoftLimit() int64 { return softOf(r.Limit, r.Soft) }

// Effective returns the rule as its engine counts it: Limit (and Burst, if
// set) widened by the soft band. Decisions still report the rule's own
// Limit.
func (r Rule) Effective() Rule {
	if r.Soft == 0 {
		return r
	}
	e := r
	e.Limit = softOf(r.Limit, r.Soft)
	if r.Burst != 0 {
		e.Burst = softOf(r.Burst, r.Soft)
	}
	e.Soft = 0
	return e
}

// softOf widens x by the soft band s.
func softOf(x int64, s float64) int64 {
	if s <= 0 || math.IsNaN(s) || math.IsInf(s, 0) {
		return x
	}
	return max(int64(math.Floor(float64(x)*(1+s))), x)
}

// validateSoft checks Soft, and that the widened rule is still valid.
func (r Rule) validateSoft(bad func(string, ...any) error) error {
	s := r.Soft
	switch {
	case math.IsNaN(s) || math.IsInf(s, 0):
		return bad("Soft %v is not a number: use a fraction of the limit such as 0.1 (10%% over Limit), or 0 for none", s)
	case s < 0:
		return bad("Soft %v is negative: the soft band is how far past Limit the rule admits, a fraction such as 0.1; use 0 for none", s)
	case s > MaxSoft:
		return bad("Soft %v is above %d: raise the Limit instead", s, MaxSoft)
	case s == 0:
		return nil
	}
	e := r.Effective()
	if e.Limit > MaxLimit || e.Burst > MaxLimit {
		return bad("Limit·(1+Soft) is %d, above %d: lower Limit or Soft", max(e.Limit, e.Burst), int64(MaxLimit))
	}
	soft := func(format string, args ...any) error {
		return bad("with its soft band (Limit·(1+Soft) = %d): "+format, append([]any{e.Limit}, args...)...)
	}
	return e.validateAlgorithm(soft)
}
