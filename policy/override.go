package policy

import "fmt"

// tierSeparator joins a rule's name and an override's Tier into the name the
// override's keys are counted under (see Rule.Tier). Rule names cannot hold
// it, so a tier never shares counts with a rule of its own.
const tierSeparator = "/"

// maxOverrideKeys bounds the keys named by one rule's overrides, all tiers
// together: the limiter holds them in memory, one map entry each.
const maxOverrideKeys = 1 << 20

// Override gives named keys of a rule their own limit: a customer on a
// higher plan, an internal service allow-listed, a client blocked. It keeps
// the rule's Algorithm, Window, Precision, WarmUp and Mode; exactly one of
// Limit, Unlimited and Deny says what its keys get.
//
// A limiter looks the key of every check of the rule up in one map of the
// rule's override keys (no allocation); a key found there is decided under
// its tier, counted apart from the rule's other keys, in the store under
// the name Rule.Tier returns.
type Override struct {
	// Tier names the override: 1 to 64 bytes of letters, digits,
	// '_', '.' and '-', unique within the rule.
	Tier string
	// Keys are the keys the override applies to: each non-empty, in one
	// override of the rule only.
	Keys []string
	// Limit replaces the rule's Limit for these keys: 1 to MaxLimit.
	Limit int64
	// Burst replaces the rule's Burst for these keys (TokenBucket and GCRA
	// only); 0 means Limit.
	Burst int64
	// Unlimited admits every check of these keys and counts nothing: the
	// Decision is Allowed with Limit 0.
	Unlimited bool
	// Deny denies every check of these keys.
	Deny bool
}

// Tier returns the rule the keys of r's override named tier are decided
// under: r with the override's limit, named r.Name + "/" + tier,
// without overrides and without elasticity (Ceiling, Capacity: a tier's
// limit is its own); ok is false if r has no such override. Soft and
// Shadow apply to a tier as to its rule. An
// Unlimited override's rule has Limit 0 and Deny false: nothing counts it.
func (r Rule) Tier(tier string) (Rule, bool) {
	for _, o := range r.Overrides {
		if o.Tier == tier {
			return r.tierRule(o), true
		}
	}
	return Rule{}, false
}

func (r Rule) tierRule(o Override) Rule {
	t := r
	t.Name = r.Name + tierSeparator + o.Tier
	t.Overrides = nil
	t.Limit, t.Burst, t.Deny = o.Limit, o.Burst, o.Deny
	t.Ceiling, t.Capacity = 0, "" // a tier's limit is its own: not elastic
	if o.Unlimited || o.Deny {
		t.Limit, t.Burst, t.WarmUp, t.Soft = 0, 0, 0, 0
	}
	return t
}

// validateOverrides checks each override as the rule it makes, and that no
// tier or key appears twice.
func (r Rule) validateOverrides(bad func(string, ...any) error) error {
	if len(r.Overrides) == 0 {
		return nil
	}
	tiers := make(map[string]bool, len(r.Overrides))
	keys := make(map[string]string)
	for i, o := range r.Overrides {
		if err := ValidateName(o.Tier); err != nil {
			return bad("override %d: Tier %q: use 1 to %d letters, digits, '_', '.' or '-'", i+1, o.Tier, maxNameLength)
		}
		if tiers[o.Tier] {
			return bad("override tier %q appears twice: merge the two, or rename one", o.Tier)
		}
		tiers[o.Tier] = true
		set := 0
		for _, b := range []bool{o.Limit != 0, o.Unlimited, o.Deny} {
			if b {
				set++
			}
		}
		if set != 1 {
			return bad("override tier %q: set exactly one of Limit, Unlimited and Deny", o.Tier)
		}
		if len(o.Keys) == 0 {
			return bad("override tier %q has no Keys: name the keys it applies to, or remove it", o.Tier)
		}
		if len(keys)+len(o.Keys) > maxOverrideKeys {
			return bad("overrides name more than %d keys: move the largest tiers to rules of their own", maxOverrideKeys)
		}
		for _, k := range o.Keys {
			if k == "" {
				return bad("override tier %q has an empty key: remove it", o.Tier)
			}
			if prev, dup := keys[k]; dup {
				return bad("key %q is in override tiers %q and %q: a key may have one override only", k, prev, o.Tier)
			}
			keys[k] = o.Tier
		}
		if o.Limit == 0 {
			if o.Burst != 0 {
				return bad("override tier %q: Burst is set without a Limit: remove Burst", o.Tier)
			}
			continue
		}
		t := r.tierRule(o)
		t.Name = r.Name // the tier's name holds the separator, which names cannot
		if err := t.Validate(); err != nil {
			return fmt.Errorf("override tier %q: %w", o.Tier, err)
		}
	}
	return nil
}

// validateDeny checks a Deny rule: Limit 0, no Burst, WarmUp or overrides,
// a Window in range (the RetryAfter of its denials).
func (r Rule) validateDeny(bad func(string, ...any) error) error {
	if r.Algorithm > SlidingLog || r.Mode > Strict {
		return bad("unknown Algorithm %d or Mode %d: use the policy constants", uint8(r.Algorithm), uint8(r.Mode))
	}
	switch {
	case r.Limit != 0:
		return bad("Deny is set with Limit %d: a Deny rule admits nothing; set Limit 0, or remove Deny", r.Limit)
	case r.Burst != 0 || r.WarmUp != 0 || r.Soft != 0 || r.Ceiling != 0 || r.Capacity != "":
		return bad("Deny is set with a Burst, WarmUp, Soft, Ceiling or Capacity: remove them")
	case len(r.Overrides) != 0:
		return bad("Deny is set with Overrides: give the denied keys a Deny override of a limited rule instead")
	case r.Window < MinWindow || r.Window > MaxWindow:
		return bad("Window %v is out of range: it must be between %v and %v (a Deny rule's denials retry after it)", r.Window, MinWindow, MaxWindow)
	}
	return nil
}
