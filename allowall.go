package sluice

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/internal/engine"
)

// Check names one limit of a request: a rule and the key it is counted
// under (for AllowAll).
type Check struct {
	// Rule is the name of the rule.
	Rule string
	// Key is the key under that rule: a client IP, a user, an API key.
	Key string
}

// ErrInvalidChecks means AllowAll's checks were empty or named the same
// rule and key twice.
var ErrInvalidChecks = errors.New("sluice: invalid checks")

// smallChecks is how many checks AllowAll decides without allocating.
const smallChecks = 8

// taken is one check of AllowAll: its rule and, once decided, its result.
type taken struct {
	r   *rule
	key string
	res Decision
	el  elasticTake // rc, counted: the rule's; crc, capCounted: its capacity's
}

// AllowAll checks a request of cost n against every check at once and
// counts it against all or none: if any check denies it, nothing is counted
// against the others (a denial by the per-user limit does not use up the
// per-IP one). Typical uses are layered limits (10/s and 1000/h for the
// same key) and several keys (per IP and per user).
//
// The Decision is the most restrictive: the denying check's if any (its
// Limit, Remaining and RetryAfter), else the smallest Remaining among the
// admitting checks, whose ResetAfter it reports. A shadow rule's would-be
// denial (Decision.Shadowed) does not deny the request; it is reported if
// no other check denies.
//
// The checks are decided one after the other, in order (put the likeliest
// to deny first: it then costs the others nothing at all), and when one
// denies, what the earlier ones counted is taken back (docs/design-bound.md,
// "Composition: AllowAll, soft and shadow rules"). A check that reaches
// the store waits as AllowN does. Up to 8 checks cost no allocation.
//
// The error is non-nil when the checks cannot be made: none, the same rule
// and key twice, an unknown rule, a cost AllowN would refuse for one of
// them, or more than one rule whose admissions cannot be taken back (a
// WarmUp, or a Strict TokenBucket, GCRA or SlidingLog); or, as for AllowN, a closed limiter or a store failure under
// [policy.FailClosed] (then nothing is counted, and the Decision is a denial).
func (l *Limiter) AllowAll(ctx context.Context, n int64, checks ...Check) (Decision, error) {
	var buf [smallChecks]taken
	ts := buf[:0]
	if len(checks) > smallChecks {
		ts = make([]taken, 0, len(checks))
	}
	if len(checks) == 0 {
		return Decision{}, fmt.Errorf("%w: no checks: pass at least one sluice.Check{Rule, Key}", ErrInvalidChecks)
	}
	warm := -1 // the check whose rule cannot refund, if any: decided last
	for i, c := range checks {
		r := l.rule(c.Rule)
		if r != nil && r.over != nil {
			r = r.tier(c.Key)
		}
		if r == nil || n < 1 || n > r.maxCost || len(c.Key) > l.opts.MaxKeyLength || l.closed.Load() {
			d, err := l.reject(r, c.Rule, c.Key, n)
			return d, fmt.Errorf("check %d: %w", i, err)
		}
		for j := range ts {
			if ts[j].r == r && ts[j].key == c.Key {
				return Decision{}, fmt.Errorf("%w: checks %d and %d are both rule %q, key %q: count each rule and key once (a cost of 2n, if that is meant)", ErrInvalidChecks, j, i, c.Rule, c.Key)
			}
		}
		if r.refunder == nil {
			if warm >= 0 {
				return Decision{}, fmt.Errorf("%w: rules %q and %q both count admissions that cannot be taken back (a WarmUp, or a Strict TokenBucket, GCRA or SlidingLog): pass at most one such rule to AllowAll", ErrInvalidChecks, ts[warm].r.name, r.name)
			}
			warm = i
		}
		ts = append(ts, taken{r: r, key: c.Key})
	}
	if warm >= 0 && warm != len(ts)-1 {
		ts[warm], ts[len(ts)-1] = ts[len(ts)-1], ts[warm]
	}
	for i := range ts {
		t := &ts[i]
		var d Decision
		var err error
		if t.r.capacity != nil {
			d, t.el, err = l.takeElastic(ctx, t.r, t.key, n)
		} else {
			var res engine.Result
			res, t.el.rc, err = t.r.eng.Take(ctx, t.key, n)
			d = decision(res, t.r.limit)
			t.r.count(d, err)
			t.el.counted = d.Allowed
			if t.r.extra|boolInt(t.r.shadow) != 0 {
				d, err = t.r.shape(d, err)
			}
		}
		t.res = d
		if err != nil || !d.Allowed {
			refund(ts[:i], n)
			return d, err
		}
	}
	return mostRestrictive(ts), nil
}

// refund takes back what the checks ts counted.
func refund(ts []taken, n int64) {
	for i := len(ts) - 1; i >= 0; i-- {
		ts[i].r.refund(ts[i].key, n, ts[i].el)
	}
}

// mostRestrictive returns the Decision of admitted checks ts: a shadow
// rule's would-be denial if there is one, else the smallest Remaining.
func mostRestrictive(ts []taken) Decision {
	best := 0
	for i := 1; i < len(ts); i++ {
		a, b := ts[i].res, ts[best].res
		switch {
		case a.Shadowed() != b.Shadowed():
			if a.Shadowed() {
				best = i
			}
		case a.Remaining < b.Remaining:
			best = i
		}
	}
	return ts[best].res
}
