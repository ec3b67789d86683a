package sluice

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/policy"
)

// CapacityKey is the key an elastic rule's admissions are counted under in
// its shared capacity rule (policy.Rule.Capacity). Check the capacity rule
// under it to see the capacity's state (Peek).
const CapacityKey = "*"

// Elastic rules (policy.Rule.Ceiling): the engine counts a key up to
// Ceiling; an admission that takes the key past its Limit (into the elastic
// band) stands only if the shared capacity rule admits it too, and is taken
// back otherwise. Every admission of the rule is counted against the
// capacity while it has room, so the capacity measures the rule's whole
// traffic: a lone heavy key gets the room the others leave, and loses it as
// soon as their traffic fills the capacity. A key within its Limit is never
// denied by the capacity.

// elasticTake is what a check of an elastic rule counted: the rule's
// admission (rc) and the capacity's (crc), for a refund.
type elasticTake struct {
	rc, crc             engine.Receipt
	counted, capCounted bool
}

// linkCapacity finds each elastic rule's capacity rule.
func (l *Limiter) linkCapacity(rules []policy.Rule) error {
	for _, pr := range rules {
		if pr.Capacity == "" {
			continue
		}
		c := l.rules[pr.Capacity]
		switch {
		case c == nil:
			return fmt.Errorf("%w %q: Capacity %q is not a rule of this limiter: pass the capacity rule to New too", policy.ErrInvalidRule, pr.Name, pr.Capacity)
		case c.capacity != nil || l.isElastic(rules, c.name):
			return fmt.Errorf("%w %q: Capacity %q is itself elastic: a capacity rule must be a plain rule", policy.ErrInvalidRule, pr.Name, pr.Capacity)
		}
		l.rules[pr.Name].capacity = c
	}
	return nil
}

// isElastic reports whether the rule named name has a Capacity.
func (l *Limiter) isElastic(rules []policy.Rule, name string) bool {
	for _, pr := range rules {
		if pr.Name == name {
			return pr.Capacity != ""
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
// to its Ceiling, then the capacity, which an admission into the elastic
// band needs. The Decision speaks of Limit.
func (l *Limiter) takeElastic(ctx context.Context, r *rule, key string, n int64) (Decision, elasticTake, error) {
	var et elasticTake
	res, rc, err := r.eng.Take(ctx, key, n)
	r.counts.Check(engine.OutcomeOf(res.Allowed, err))
	d := res.Decision(r.limit)
	if err != nil || !res.Allowed {
		d, err = r.shape(d, err)
		return d, et, err
	}
	et.rc, et.counted = rc, true
	// Past Limit: the room left under Ceiling is less than the band.
	band := res.Remaining < r.extra
	c := r.capacity
	cres, crc, cerr := c.eng.Take(ctx, CapacityKey, n)
	c.counts.Check(engine.OutcomeOf(cres.Allowed, cerr))
	if cerr == nil && cres.Allowed {
		et.crc, et.capCounted = crc, true
	} else if band {
		// The capacity is full (or could not be asked): hold the key to
		// its Limit.
		r.eng.Refund(key, n, rc)
		et.counted = false
		d.Allowed = false
		d.Remaining = 0
		d.RetryAfter = cres.RetryAfter
		if d.RetryAfter <= 0 {
			d.RetryAfter = max(d.ResetAfter, 1)
		}
	}
	d, err = r.shape(d, nil)
	return d, et, err
}

// refund takes back what a check of r counted for key (AllowAll).
func (r *rule) refund(key string, n int64, et elasticTake) {
	if et.counted {
		r.eng.Refund(key, n, et.rc)
	}
	if et.capCounted {
		r.capacity.eng.Refund(CapacityKey, n, et.crc)
	}
}
