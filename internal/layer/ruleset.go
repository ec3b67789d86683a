package layer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/dunglas/httpsfv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// MaxRules is the most rules a route may layer (AllowAll decides up to 8
// checks without allocating).
const MaxRules = 8

// RuleSet is rules of a Limiter checked together, and the rate-limit fields
// that tell a client about them: what httplimit's middleware does for each
// request of a route, and grpclimit's interceptors for each call, so that
// both decide alike and send the same fields, byte for byte.
//
// Each check reads what is in force for its keys: the limit of each key's
// override tier, and the rules as the last SetRules or WatchFile reload
// left them (their Limit and Window). A RuleSet holds only the rules'
// names, serialized once.
type RuleSet struct {
	lim   *sluice.Limiter
	names []string
	per   []ruleHeaders
}

// Result is the outcome of a RuleSet.Check.
type Result struct {
	// Decision is the check's: AllowN's for one rule, AllowAll's (the most
	// restrictive one) for several.
	Decision sluice.Decision
	// Denied is the index of the rule that denied the check (that blocks
	// it, when Decision.Blocked()), -1 when it was admitted.
	Denied int
	// Values are the fields' values, in one string.
	Values Values
}

// NewRuleSet returns the rules of lim named names, checked together in that
// order: 1 to 8 rules, each a rule of lim (a name may repeat, to be
// checked under another key).
func NewRuleSet(lim *sluice.Limiter, names ...string) (*RuleSet, error) {
	switch {
	case lim == nil:
		return nil, errors.New("layer: NewRuleSet: the Limiter is nil")
	case len(names) == 0:
		return nil, errors.New("no Rules: name at least one rule of the limiter")
	case len(names) > MaxRules:
		return nil, fmt.Errorf("%d Rules: a route layers at most %d", len(names), MaxRules)
	}
	rs := &RuleSet{lim: lim}
	for _, name := range names {
		pr, ok := lim.Rule(name)
		if !ok {
			return nil, fmt.Errorf("rule %q: the limiter has no such rule", name)
		}
		if pr.InFlight {
			return nil, fmt.Errorf("rule %q is an InFlight rule: a RuleSet checks rates; take its slot with Limiter.Acquire (httplimit and grpclimit routes do so)", name)
		}
		rh, err := ruleHeader(pr)
		if err != nil {
			return nil, err
		}
		rs.names = append(rs.names, pr.Name)
		rs.per = append(rs.per, rh)
	}
	return rs, nil
}

// Len returns the number of rules.
func (rs *RuleSet) Len() int { return len(rs.names) }

// Name returns the name of the i-th rule.
func (rs *RuleSet) Name(i int) string { return rs.names[i] }

// Names returns the names of the rules, in order, in a new slice.
func (rs *RuleSet) Names() []string { return slices.Clone(rs.names) }

// Check decides cost n under keys, one per rule in order, all or none
// (Limiter.AllowN for one rule, Limiter.AllowAll for several: a denial by
// one rule uses up nothing of the others), and builds the values of the
// fields in set (see httplimit.Headers for what each says). An error is the
// limiter's: the check was not made, and the Result is empty.
//
// It allocates one string for the fields (none when set is 0), and reads
// the clock only for X-RateLimit-Reset.
func (rs *RuleSet) Check(ctx context.Context, keys []string, n int64, set FieldSet) (Result, error) {
	if len(keys) != len(rs.names) {
		return Result{Denied: -1}, fmt.Errorf("layer: RuleSet.Check: %d keys for %d rules", len(keys), len(rs.names))
	}
	if len(rs.names) == 1 {
		var one [1]item // not the eight a layered set needs: zeroed per check
		return rs.check(ctx, keys, n, set, one[:])
	}
	var buf [MaxRules]item
	return rs.check(ctx, keys, n, set, buf[:len(rs.names)])
}

func (rs *RuleSet) check(ctx context.Context, keys []string, n int64, set FieldSet, items []item) (Result, error) {
	d, bind, deny, err := rs.decide(ctx, keys, n, set, items)
	if err != nil {
		return Result{Denied: -1}, err
	}
	return Result{Decision: d, Denied: deny, Values: fields(set, items, bind, d)}, nil
}

// decide checks cost n against the rules under keys (one per rule), all or
// none, and returns the check's decision, the index of the rule whose state
// the legacy fields give (bind: the enforcing rule that binds, -1 if none
// does) and of the rule that denied it (deny, -1 if admitted). It fills
// items with each rule's state, for the RateLimit fields.
func (rs *RuleSet) decide(ctx context.Context, keys []string, n int64, set FieldSet, items []item) (d sluice.Decision, bind, deny int, err error) {
	if len(rs.names) == 1 {
		d, err = rs.lim.AllowN(ctx, rs.names[0], keys[0], n)
		if err != nil {
			return d, -1, -1, err
		}
		items[0] = rs.item(&rs.per[0], d, set)
		items[0].shadowed, items[0].soft = d.Shadowed(), d.InSoftBand()
		bind, deny = 0, -1
		if rs.per[0].shadow || d.Limit == 0 {
			bind = -1 // a dry run, or no limit on the key
		}
		if !d.Allowed {
			deny = 0
		}
		return d, bind, deny, nil
	}
	var buf [MaxRules]sluice.Check
	checks := buf[:len(rs.names)]
	for i, name := range rs.names {
		checks[i] = sluice.Check{Rule: name, Key: keys[i]}
	}
	d, err = rs.lim.AllowAll(ctx, n, checks...)
	if err != nil {
		return d, -1, -1, err
	}
	// AllowAll's decision is the most restrictive one; each rule's own
	// state is a Peek (no count). The legacy fields speak of an enforcing
	// rule: on a denial the one that denied (its Limit is the decision's),
	// else the one with the least remaining.
	bind, deny = -1, -1
	least := int64(-1)
	for i, name := range rs.names {
		p, err := rs.lim.Peek(name, keys[i])
		if err != nil {
			return d, -1, -1, err
		}
		it := rs.item(&rs.per[i], p, set)
		it.shadowed = rs.per[i].shadow && d.Shadowed() && p.Remaining < n
		it.soft = p.InSoftBand() || d.InSoftBand() && p.Limit == d.Limit && p.Remaining == 0
		items[i] = it
		if rs.per[i].shadow || p.Limit == 0 || !d.Allowed && p.Limit != d.Limit {
			continue
		}
		if least < 0 || p.Remaining < least {
			bind, least = i, p.Remaining
		}
	}
	if !d.Allowed {
		deny = bind
		if bind >= 0 {
			// The denial's own state: its reset is never before its
			// RetryAfter.
			items[bind].remaining, items[bind].reset = d.Remaining, d.ResetAfter
		} else {
			deny = rs.blockedRule(keys)
		}
	}
	return d, bind, deny, nil
}

// item is a rule's state for an answer from its decision d: the limit in
// force for the key, the rule's window in force (read only when
// RateLimit-Policy is sent).
func (rs *RuleSet) item(rh *ruleHeaders, d sluice.Decision, set FieldSet) item {
	it := item{rh: rh, limit: d.Limit, remaining: d.Remaining, reset: d.ResetAfter}
	if set&FieldPolicy != 0 && d.Limit > 0 {
		it.window, _ = rs.lim.Window(rh.name)
	}
	return it
}

// blockedRule returns the index of the rule that blocks keys (a Deny rule
// or tier: Limit 0, denied), for the Denial; 0 if none says so any more.
func (rs *RuleSet) blockedRule(keys []string) int {
	for i, name := range rs.names {
		if p, err := rs.lim.Peek(name, keys[i]); err == nil && p.Blocked() {
			return i
		}
	}
	return 0
}

// ruleHeaders holds what the fields say about one rule that never changes:
// its name as an sf-string, in the prefixes of its items. Its limit and
// window are read for each answer: tiers and reloads change them.
type ruleHeaders struct {
	name            string // the rule's name, for Limiter.Window
	shadow          bool   // policy.Rule.Shadow: a dry run
	policyPrefix    string // `"name";q=`
	rateLimitPrefix string // `"name";r=`
}

// ruleHeader serializes, once per RuleSet, a rule's fixed parts with
// httpsfv: the name is an sf-string, so any rule name is written
// correctly.
func ruleHeader(pr policy.Rule) (ruleHeaders, error) {
	name, err := httpsfv.Marshal(httpsfv.NewItem(pr.Name))
	if err != nil {
		return ruleHeaders{}, fmt.Errorf("rule %q: %w", pr.Name, err)
	}
	return ruleHeaders{name: pr.Name, shadow: pr.Shadow, policyPrefix: name + ";q=", rateLimitPrefix: name + ";r="}, nil
}
