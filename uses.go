package sluice

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/policy"
)

// ErrRuleInUse is wrapped by the error of a SetRules call that leaves out
// a rule that something still checks (see Limiter.Require). Nothing
// changes.
var ErrRuleInUse = errors.New("sluice: rule in use")

// Require records that user (a description for error messages, such as
// `httplimit route "GET /api/"`) checks the rules named names. Until
// release is called, SetRules refuses, with an error wrapping
// ErrRuleInUse, a set that leaves one of them out (or turns a rate rule
// into an InFlight rule, or back), and WatchFile keeps the rules in force
// and logs the refusal at Error: a reload cannot silently turn a route's
// checks into ErrUnknownRule. A rule that is only changed
// (its limit, its window) is not left out.
//
// A name may be a rate rule's or an InFlight rule's. A name that is not a
// rule of the limiter now is an error wrapping ErrUnknownRule, and then
// nothing is recorded. release is idempotent.
// httplimit and grpclimit call Require when they are built, for every rule
// they name, and release once the middleware is garbage.
func (l *Limiter) Require(user string, names ...string) (release func(), err error) {
	l.setMu.Lock()
	defer l.setMu.Unlock()
	set := l.set.Load()
	for _, name := range names {
		if set.byName[name] == nil && l.inf.rule(name) == nil {
			return nil, fmt.Errorf("%w %q (needed by %s)", ErrUnknownRule, name, user)
		}
	}
	if l.uses == nil {
		l.uses = map[string]map[string]int{}
	}
	for _, name := range names {
		if l.uses[name] == nil {
			l.uses[name] = map[string]int{}
		}
		l.uses[name][user]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.setMu.Lock()
			defer l.setMu.Unlock()
			for _, name := range names {
				if l.uses[name][user]--; l.uses[name][user] <= 0 {
					delete(l.uses[name], user)
				}
				if len(l.uses[name]) == 0 {
					delete(l.uses, name)
				}
			}
		})
	}, nil
}

// checkUses returns an error wrapping ErrRuleInUse if next (the rate
// rules) and inFlight lack a rule that something requires, or turn it from
// a rate into an InFlight rule or back (what checks it takes a slot, or
// checks a rate). The caller holds setMu.
func (l *Limiter) checkUses(next *ruleSet, inFlight []policy.Rule) error {
	cur := l.set.Load()
	var missing []string
	for name := range l.uses {
		rate := next.byName[name] != nil
		slot := slices.ContainsFunc(inFlight, func(pr policy.Rule) bool { return pr.Name == name })
		if !rate && !slot {
			missing = append(missing, name)
		} else if was := cur.byName[name] != nil; was != rate {
			return fmt.Errorf("%w: the new rules turn %q (checked by %s) from a rate into an InFlight rule or back: keep its kind, or rebuild what checks it first", ErrRuleInUse, name, strings.Join(slices.Sorted(maps.Keys(l.uses[name])), ", "))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	var b strings.Builder
	for i, name := range missing {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%q (checked by %s)", name, strings.Join(slices.Sorted(maps.Keys(l.uses[name])), ", "))
	}
	return fmt.Errorf("%w: the new rules leave out %s: keep it in the set (change its limit if needed), or rebuild what checks it without it first", ErrRuleInUse, b.String())
}
