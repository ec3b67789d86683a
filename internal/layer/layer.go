// Package layer is what a front door does with a route's rules per
// request: Split sorts them into the rate rules, checked first, and the
// InFlight rules, whose slots are taken once the rates admit; a RuleSet
// checks the rate rules together and builds the rate-limit fields that
// tell the client about them. httplimit and grpclimit share it, so that
// both decide alike and send the same fields, byte for byte; it is
// sluice's machinery, with no compatibility promise.
package layer

import (
	"fmt"

	"github.com/sluicehq/sluice"
)

// Rule is one rule a route layers: its name and the key it is checked
// under, Own when the route names that key itself (else the route's
// default key, already in Key).
type Rule[K any] struct {
	Name string
	Key  K
	Own  bool
}

// Route is a route's rules sorted: the rate rules' names, the InFlight
// rules' names, and the keys of both in that order.
type Route[K any] struct {
	Rates, Slots []string
	Keys         []K
}

// Split sorts rules by what lim says of each. It refuses a rule lim does
// not have, a rule listed twice under the route's default key, and a Cost
// (costed) on a route of InFlight rules alone, where one slot is taken
// whatever the cost of the unit (a "request", a "call").
func Split[K any](lim *sluice.Limiter, rules []Rule[K], costed bool, unit string) (Route[K], error) {
	var rt Route[K]
	var slotKeys []K
	for i, r := range rules {
		for _, o := range rules[:i] {
			if o.Name == r.Name && !o.Own && !r.Own {
				return rt, fmt.Errorf("rule %q twice under the same key: list each rule once per key (a Cost of 2, if that is meant)", r.Name)
			}
		}
		pr, ok := lim.Rule(r.Name)
		if !ok {
			return rt, fmt.Errorf("rule %q: the limiter has no such rule", r.Name)
		}
		if pr.InFlight {
			rt.Slots = append(rt.Slots, r.Name)
			slotKeys = append(slotKeys, r.Key)
			continue
		}
		rt.Rates = append(rt.Rates, r.Name)
		rt.Keys = append(rt.Keys, r.Key)
	}
	if len(rt.Rates) == 0 && costed {
		return rt, fmt.Errorf("a Cost with only InFlight rules (%q): a %s takes one slot whatever its cost; remove Cost, or add the rate rule it weighs", rt.Slots, unit)
	}
	rt.Keys = append(rt.Keys, slotKeys...)
	return rt, nil
}
