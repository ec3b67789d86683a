package sluice

import (
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/policy"
)

// SetRules replaces the limiter's rules with rules, atomically, while
// checks run: every check sees the old set or the new one whole.
//
// A rule whose counting geometry is unchanged (the same name, algorithm,
// window, precision and mode) keeps its engine and so every count, local
// and in the store; if only its Limit changed, the next check is decided
// on the new limit (a TokenBucket, GCRA or SlidingLog rule keeps its counts
// only if nothing changed: their state is measured in the old rate). Any
// other rule starts with empty local counts; a shared rule whose name and
// sub-window are unchanged still finds its store counts. A rule that is not
// in rules is gone: checks of it return ErrUnknownRule, and its pending
// counts are pushed to the store once more. Overrides follow their rule:
// a tier whose rule keeps its geometry keeps its counts.
//
// The rules are validated first, as by New; if any is invalid, or a
// shared rule would need a store this limiter has no syncer for, SetRules
// returns the error and changes nothing. So does a set that leaves out a
// rule that something still checks (an httplimit route, a grpclimit
// method: see Require): the error wraps ErrRuleInUse.
//
// A Local rule that is left out keeps its engine, unused, for a window
// (the time its counts take to lapse: its Window, or for a bucket the
// time to refill its Burst): if a rule of that name with the same counting
// geometry comes back within it, it takes the engine back with every
// count, as if it had never left. A shared rule that comes back finds its
// counts in the store (they were pushed when it left).
//
// The changes are logged to Options.Logger.
func (l *Limiter) SetRules(rules ...policy.Rule) error {
	l.setMu.Lock()
	defer l.setMu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	if len(rules) == 0 {
		return fmt.Errorf("%w: no rules: pass at least one policy.Rule", ErrInvalidOptions)
	}
	rules, inRules, inFleet, err := splitInFlight(rules, l.opts.Redis != nil)
	if err != nil {
		return err
	}
	if inFleet && l.sync == nil {
		return fmt.Errorf("%w: an InFlight rule shares its slots through the store, but this limiter was created with Local rules only and runs no sync: create it with at least one shared rule, or use policy.Local", policy.ErrInvalidRule)
	}
	resolved, shared, err := resolveRules(rules, l.opts.Redis != nil)
	if err != nil {
		return err
	}
	if shared && l.sync == nil {
		for _, pr := range resolved {
			if pr.Mode != policy.Local && !pr.Deny {
				return fmt.Errorf("%w %q: Mode %v shares counts through the store, but this limiter was created with Local rules only and runs no sync: create it with at least one shared rule, or use policy.Local", policy.ErrInvalidRule, pr.Name, pr.Mode)
			}
		}
	}
	old := l.set.Load()
	now := l.now()
	b := &build{kept: map[engine.Engine]bool{}}
	prev := old.lookup(now)
	next := newRuleSet(len(resolved))
	for _, pr := range resolved {
		r, err := l.buildRule(pr, prev, b)
		if err != nil {
			retire(b.fresh)
			return err
		}
		next.add(r)
	}
	if err := l.linkCapacity(next, resolved, prev, b); err != nil {
		retire(b.fresh)
		return err
	}
	if err := l.checkUses(next, inRules); err != nil {
		retire(b.fresh)
		return err
	}
	gone := next.retain(old, b, now)
	for _, rt := range b.retune {
		rt.eng.SetLimit(rt.limit)
	}
	for _, e := range b.fresh {
		e.Tick(now)
	}
	l.fleetMu.Lock()
	l.setFleet(next, l.nhat.Load(), l.degraded.Load())
	l.set.Store(next)
	l.fleetMu.Unlock()
	retire(gone)
	l.inf.setRules(inRules)
	l.logChanges(old, next)
	return nil
}

// retire takes engines out of the store's sync.
func retire(engines []engine.Engine) {
	for _, e := range engines {
		if r, ok := e.(engine.Retirer); ok {
			r.Retire()
		}
	}
}

// logChanges logs the rules SetRules added, removed and changed, by
// engine name (tiers as rule/tier).
func (l *Limiter) logChanges(old, next *ruleSet) {
	var added, removed, changed, kept []string
	for name, r := range next.all {
		o, ok := old.all[name]
		switch {
		case !ok && old.retired[name] != nil && old.retired[name].eng == r.eng:
			added = append(added, name+" (counts kept)")
		case !ok:
			added = append(added, name)
		case o.eng != r.eng:
			changed = append(changed, name+" (counts restart)")
		case o.pr.Limit != r.pr.Limit:
			changed = append(changed, fmt.Sprintf("%s (limit %d -> %d)", name, o.pr.Limit, r.pr.Limit))
		default:
			kept = append(kept, name)
		}
	}
	for name := range old.all {
		if next.all[name] == nil {
			removed = append(removed, name)
		}
	}
	for _, s := range [][]string{added, removed, changed} {
		slices.Sort(s)
	}
	l.opts.Logger.Info("sluice: rules replaced", "added", added, "removed", removed, "changed", changed, "unchanged", len(kept))
}
