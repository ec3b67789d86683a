package sluice

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
)

// CapacityKey is the key an elastic rule's admissions are counted under in
// its shared capacity rule (policy.Rule.Capacity). Check the capacity rule
// under it to see the capacity's state (Peek).
const CapacityKey = "*"

// Elastic rules (policy.Rule.Ceiling): the engine counts a key up to
// Ceiling. Every admission of an elastic rule is also counted on its
// capacity's meter: a rule named "<capacity>.elastic" that the limiter adds,
// with the capacity rule's window and mode and twice its limit, so that it
// keeps counting while the capacity is full. An admission that takes the
// key past its Limit (into the elastic band) stands only if the meter, with
// it, is within the capacity's Limit; otherwise it is taken back (from the
// meter too) and denied. So a lone heavy key gets the room the others
// leave, and is held to its Limit as soon as their traffic, in-limit
// traffic included, fills the capacity. A key within its Limit is never
// denied by the capacity. The capacity rule itself is not touched: check it
// directly to limit the whole service too.

// MeterSuffix ends the name of the meter the limiter adds for each capacity
// rule of an elastic rule: Peek("<capacity>.elastic", CapacityKey) shows how
// much of the capacity the elastic rules use.
const MeterSuffix = ".elastic"

// elasticTake is what a check of an elastic rule counted: the rule's
// admission (rc) and the meter's (crc), for a refund.
type elasticTake struct {
	rc, crc             engine.Receipt
	counted, capCounted bool
}

// linkCapacity adds to set the meter of each capacity rule that an elastic
// rule names, and links the elastic rules to it. old and b are buildRule's:
// a meter whose capacity rule kept its geometry keeps its counts.
func (l *Limiter) linkCapacity(set *ruleSet, rules []policy.Rule, old map[string]*rule, b *build) error {
	for _, pr := range rules {
		if pr.Capacity == "" {
			continue
		}
		var cp *policy.Rule
		for i := range rules {
			if rules[i].Name == pr.Capacity {
				cp = &rules[i]
			}
		}
		switch {
		case cp == nil:
			return fmt.Errorf("%w %q: Capacity %q is not a rule of this limiter: pass the capacity rule to New too", policy.ErrInvalidRule, pr.Name, pr.Capacity)
		case rulegeo.Calendar(*cp):
			return fmt.Errorf("%w %q: Capacity %q is a calendar quota: a capacity rule counts over a Window", policy.ErrInvalidRule, pr.Name, pr.Capacity)
		case cp.Capacity != "":
			return fmt.Errorf("%w %q: Capacity %q is itself elastic: a capacity rule must be a plain rule", policy.ErrInvalidRule, pr.Name, pr.Capacity)
		}
		name := cp.Name + MeterSuffix
		m := set.byName[name]
		if m == nil {
			meter := *cp
			meter.Name = name
			meter.Limit = meter2(cp.Limit)
			meter.Soft, meter.Shadow, meter.Overrides = 0, false, nil
			if err := meter.Validate(); err != nil {
				return fmt.Errorf("%w %q: the meter of its Capacity %q: %v", policy.ErrInvalidRule, pr.Name, pr.Capacity, err)
			}
			r, err := l.buildRule(meter, old, b)
			if err != nil {
				return err
			}
			set.add(r)
			m = r
		} else if m.limit != meter2(cp.Limit) || l.isUser(rules, name) {
			return fmt.Errorf("%w %q: a rule is named %q, the name of its Capacity's meter: rename it", policy.ErrInvalidRule, pr.Name, name)
		}
		r := set.byName[pr.Name]
		r.capacity, r.capLimit = m, cp.Limit
		r.capRetry = max(rulegeo.SubWindow(*cp), cp.Interval(), 1)
	}
	return nil
}

// meter2 is a meter's limit for a capacity of limit c.
func meter2(c int64) int64 { return min(2*c, policy.MaxLimit) }

// isUser reports whether rules has one named name.
func (l *Limiter) isUser(rules []policy.Rule, name string) bool {
	for _, pr := range rules {
		if pr.Name == name {
			return true
		}
	}
	return false
}

// allowElastic is AllowN for an elastic rule.
func (l *Limiter) allowElastic(ctx context.Context, r *rule, key string, n int64) (Decision, error) {
	d, _, err := l.takeElastic(ctx, r, key, n)
	return d, err
}

// takeElastic decides n for key under elastic rule r: the rule's engine up
// to its Ceiling, then the meter, within the capacity's Limit for an
// admission into the elastic band. The Decision speaks of Limit.
func (l *Limiter) takeElastic(ctx context.Context, r *rule, key string, n int64) (Decision, elasticTake, error) {
	var et elasticTake
	res, rc, err := r.eng.Take(ctx, key, n)
	r.counts.Check(engine.OutcomeOf(res.Allowed, err))
	d := decision(res, r.limit)
	if err != nil || !res.Allowed {
		d, err = r.shape(d, err)
		return d, et, err
	}
	et.rc, et.counted = rc, true
	// Past Limit: the room left under Ceiling is less than the band.
	band := res.Remaining < r.extra
	m := r.capacity
	mres, mrc, merr := m.eng.Take(ctx, CapacityKey, n)
	m.counts.Check(engine.OutcomeOf(mres.Allowed, merr))
	if merr == nil && mres.Allowed {
		et.crc, et.capCounted = mrc, true
	}
	if band && (!et.capCounted || m.limit-mres.Remaining > r.capLimit) {
		// The capacity is full (or its meter could not be asked): hold
		// the key to its Limit.
		r.refund(key, n, et)
		et = elasticTake{}
		d.Allowed = false
		d.Remaining = 0
		d.RetryAfter = r.capRetry
	}
	d, err = r.shape(d, nil)
	return d, et, err
}

// refund takes back what a check of r counted for key (AllowAll).
func (r *rule) refund(key string, n int64, et elasticTake) {
	if et.counted && r.refunder != nil {
		r.refunder.Refund(key, n, et.rc)
	}
	if et.capCounted && r.capacity.refunder != nil {
		r.capacity.refunder.Refund(CapacityKey, n, et.crc)
	}
}
