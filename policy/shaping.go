package policy

import "math"

// maxSoft is the largest Soft a rule may have: a soft band of ten times the
// limit is already no limit worth the name.
const maxSoft = 10

// Effective returns the rule as its engine counts it: Limit (and Burst, if
// set) widened by the soft band. Decisions still report the rule's own
// Limit.
func (r Rule) Effective() Rule {
	if r.Ceiling > r.Limit && r.Soft == 0 {
		e := r
		e.Limit = r.Ceiling
		e.Ceiling, e.Capacity = 0, ""
		return e
	}
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

// validateElastic checks Ceiling and Capacity, and that the widened rule
// is still valid.
func (r Rule) validateElastic(bad func(string, ...any) error) error {
	switch {
	case r.Ceiling == 0 && r.Capacity == "":
		return nil
	case r.Ceiling == 0:
		return bad("Capacity %q is set without a Ceiling: set Ceiling (at least Limit %d) to make the rule elastic, or remove Capacity", r.Capacity, r.Limit)
	case r.Ceiling < r.Limit:
		return bad("Ceiling %d is below Limit %d: the ceiling is how far a key may go past its Limit while there is spare capacity; set it to at least %d", r.Ceiling, r.Limit, r.Limit)
	case r.Ceiling > MaxLimit:
		return bad("Ceiling %d is out of range: it must be at most %d", r.Ceiling, int64(MaxLimit))
	case r.Capacity == "":
		return bad("Ceiling %d is set without a Capacity: name the shared capacity rule whose room lets keys past their Limit", r.Ceiling)
	case r.Capacity == r.Name:
		return bad("Capacity names the rule itself: name another rule, the shared capacity (for example the whole service's rate)")
	case r.Soft != 0:
		return bad("Soft and Ceiling are both set: a soft band is always open, an elastic one only while Capacity has room; pick one")
	case r.Algorithm.isBucket():
		return bad("Ceiling is set on a %v rule: elasticity is for the counting algorithms (the windows and SlidingLog); raise Burst instead", r.Algorithm)
	}
	if err := ValidateName(r.Capacity); err != nil {
		return bad("Capacity: %v", err)
	}
	e := r.Effective()
	elastic := func(format string, args ...any) error {
		return bad("with its Ceiling %d as the limit: "+format, append([]any{e.Limit}, args...)...)
	}
	return e.validateAlgorithm(elastic)
}

// validateSoft checks Soft, and that the widened rule is still valid.
func (r Rule) validateSoft(bad func(string, ...any) error) error {
	s := r.Soft
	switch {
	case math.IsNaN(s) || math.IsInf(s, 0):
		return bad("Soft %v is not a number: use a fraction of the limit such as 0.1 (10%% over Limit), or 0 for none", s)
	case s < 0:
		return bad("Soft %v is negative: the soft band is how far past Limit the rule admits, a fraction such as 0.1; use 0 for none", s)
	case s > maxSoft:
		return bad("Soft %v is above %d: raise the Limit instead", s, maxSoft)
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
