package sluice

import (
	"fmt"
	"maps"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
)

// ruleSet is the limiter's rules as one immutable value: New builds one,
// SetRules builds the next and swaps it in whole, so a check sees either
// set, never a mix.
type ruleSet struct {
	fast   []*rule          // the first maxFastRules rules, scanned before the map
	byName map[string]*rule // every rule by the name checks use
	all    map[string]*rule // every engine's rule: the rules and their tiers, by engine name
	// retired are the Local engines of rules (and tiers) that a SetRules
	// left out, by engine name, kept until their counts lapse: a rule that
	// comes back with the same geometry takes its engine back. Never in
	// all; ticked and swept by the background.
	retired map[string]*retiredRule
}

// retiredRule is a left-out rule and when its counts have lapsed (store
// time, ns).
type retiredRule struct {
	*rule
	until int64
}

// lookup returns the rules a new set may take engines from, by engine
// name: the set's own and its retired ones whose counts have not lapsed
// at now.
func (s *ruleSet) lookup(now int64) map[string]*rule {
	if len(s.retired) == 0 {
		return s.all
	}
	m := maps.Clone(s.all)
	for name, rr := range s.retired {
		if rr.until > now && m[name] == nil {
			m[name] = rr.rule
		}
	}
	return m
}

// retain fills s.retired from old, the set s replaces, and returns the
// engines to retire: old's engines that s does not use, except the Local
// ones whose name s leaves free, which s keeps retired until their counts
// lapse (those old had retired stay until their own time).
func (s *ruleSet) retain(old *ruleSet, b *build, now int64) (gone []engine.Engine) {
	keep := func(name string, rr *retiredRule) {
		if s.retired == nil {
			s.retired = map[string]*retiredRule{}
		}
		s.retired[name] = rr
	}
	for name, r := range old.all {
		switch {
		case b.kept[r.eng]:
		case s.all[name] == nil && r.pr.Mode == policy.Local && r.pr.Limit != 0 && !r.pr.Deny:
			keep(name, &retiredRule{r, now + int64(lapse(r.pr))})
		default:
			gone = append(gone, r.eng)
		}
	}
	for name, rr := range old.retired {
		switch {
		case b.kept[rr.eng]: // back in s
		case rr.until > now && s.all[name] == nil:
			keep(name, rr)
		default:
			gone = append(gone, rr.eng)
		}
	}
	return gone
}

// lapse is how long a rule's counts take to lapse once it takes no more
// checks: its Window, or for a bucket whose Burst is above its Limit the
// time to refill the Burst.
func lapse(pr policy.Rule) time.Duration {
	d := pr.WindowLength()
	if mc := pr.MaxCost(); mc > pr.Limit && pr.Limit > 0 {
		d = time.Duration(float64(d) * float64(mc) / float64(pr.Limit))
	}
	return d
}

func newRuleSet(n int) *ruleSet {
	return &ruleSet{byName: make(map[string]*rule, n), all: make(map[string]*rule, n)}
}

// add adds r and its tiers.
func (s *ruleSet) add(r *rule) {
	s.byName[r.name] = r
	s.all[r.pr.Name] = r
	if len(s.fast) < maxFastRules {
		s.fast = append(s.fast, r)
	}
	for _, t := range r.over {
		s.all[t.pr.Name] = t
	}
}

// tier returns the rule key is decided under: its override's, or r.
func (r *rule) tier(key string) *rule {
	if t, ok := r.over[key]; ok {
		return t
	}
	return r
}

// buildRule makes the rule of pr (validated, Mode resolved) and of its
// overrides. With old (the rules of the set being replaced, by engine
// name) it keeps the engine of every rule whose counting geometry is
// unchanged, recording in retune the limits to set on it; fresh collects
// the engines it builds.
func (l *Limiter) buildRule(pr policy.Rule, old map[string]*rule, b *build) (*rule, error) {
	r, err := l.buildOne(pr.Name, pr, old, b)
	if err != nil || len(pr.Overrides) == 0 {
		return r, err
	}
	r.over = make(map[string]*rule)
	for _, o := range pr.Overrides {
		tr, _ := pr.Tier(o.Tier)
		t, err := l.buildOne(pr.Name, tr, old, b)
		if err != nil {
			return nil, err
		}
		for _, k := range o.Keys {
			if len(k) > l.opts.MaxKeyLength {
				return nil, fmt.Errorf("%w %q: override tier %q has a key of %d bytes, longer than Options.MaxKeyLength %d: no check could use it", policy.ErrInvalidRule, pr.Name, o.Tier, len(k), l.opts.MaxKeyLength)
			}
			r.over[k] = t
		}
	}
	return r, nil
}

// build is what SetRules collects while it builds the next set.
type build struct {
	fresh  []engine.Engine // engines built, retired if the set is refused
	retune []retune        // kept engines whose limit changes
	kept   map[engine.Engine]bool
}

type retune struct {
	eng   engine.Retuner
	limit int64
}

// buildOne makes the rule checks call name that pr's engine decides.
func (l *Limiter) buildOne(name string, pr policy.Rule, old map[string]*rule, b *build) (*rule, error) {
	eff := pr.Effective() // what the engine counts: the soft band or the ceiling in
	r := &rule{name: name, limit: pr.Limit, maxCost: pr.MaxCost(), window: pr.WindowLength(), pr: pr,
		extra: eff.MaxCost() - pr.MaxCost(), shadow: pr.Shadow}
	if pr.Limit == 0 { // Deny, or an Unlimited tier: every cost reaches the engine
		r.maxCost, r.extra = policy.MaxLimit, 0
	}
	r.eng = l.keep(old[pr.Name], pr, b)
	if r.eng == nil {
		eng, err := l.newEngine(pr)
		if err != nil {
			return nil, err
		}
		b.fresh = append(b.fresh, eng)
		r.eng = eng
	}
	r.refunder, _ = r.eng.(engine.Refunder)
	r.counts = l.tel.addRule(pr.Name) // the engine's, kept or new: one per name
	return r, nil
}

// keep returns o's engine if pr can keep it (the same counting geometry),
// recording a retune if its limit changed; nil if pr needs a new engine.
func (l *Limiter) keep(o *rule, pr policy.Rule, b *build) engine.Engine {
	if o == nil || !sameGeometry(o.pr, pr) {
		return nil
	}
	was, now := o.pr.Effective(), pr.Effective()
	if rt, ok := o.eng.(engine.Retuner); ok {
		if was.Limit != now.Limit {
			b.retune = append(b.retune, retune{rt, now.Limit})
		}
		b.kept[o.eng] = true
		return o.eng
	}
	if was.Limit == now.Limit && was.Burst == now.Burst && was.WarmUp == now.WarmUp {
		b.kept[o.eng] = true // a bucket or log rule unchanged
		return o.eng
	}
	return nil
}

// sameGeometry reports whether a and b count the same way: the same name
// (and so the same store keys), algorithm, window, sub-windows and mode,
// and neither denies or is unlimited. Their limits may differ.
func sameGeometry(a, b policy.Rule) bool {
	return a.Name == b.Name && a.Algorithm == b.Algorithm && a.Window == b.Window &&
		a.Period == b.Period && a.TimeZone == b.TimeZone &&
		rulegeo.Buckets(a) == rulegeo.Buckets(b) && a.Mode == b.Mode &&
		a.Limit != 0 && b.Limit != 0 && !a.Deny && !b.Deny
}

// setFleet passes N̂ and the store's health to every engine of s. The
// caller holds fleetMu.
func (l *Limiter) setFleet(s *ruleSet, n int64, down bool) {
	for _, r := range s.all {
		r.eng.SetFleet(n, down)
	}
}
