package engine

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// Retuner is an Engine whose rule's Limit can change while checks run,
// keeping every count, local and in the store: the sliding, weighted and
// fixed windows, in every mode. A limiter whose rule keeps its counting
// geometry and changes only its Limit retunes the engine instead of
// building a new one. The next check is decided on the new limit.
type Retuner interface {
	Engine
	// SetLimit sets the rule's Limit (1 to policy.MaxLimit).
	SetLimit(limit int64)
}

// Retirer is an Engine that must be told when its rule leaves the limiter:
// the store pushes its pending counts once more and then forgets it.
type Retirer interface {
	Engine
	// Retire takes the rule out of the store's sync after one last push.
	Retire()
}

// denyAll is a policy.Rule with Deny: every check is denied, counting
// nothing, with the rule's Window as the retry hint.
type denyAll struct{ window time.Duration }

// Check denies.
func (d denyAll) Check(context.Context, string, int64) (Result, error) {
	return Result{ResetAfter: d.window, RetryAfter: d.window}, nil
}

// Peek reports the denial.
func (d denyAll) Peek(string) Result { return Result{ResetAfter: d.window, RetryAfter: d.window} }

// Tick does nothing: a denial needs no time.
func (denyAll) Tick(int64) {}

// Sweep has no keys to evict.
func (denyAll) Sweep(int64) int { return 0 }

// SetFleet does nothing: nothing is shared.
func (denyAll) SetFleet(int64, bool) {}

// Take is Check: nothing is counted, so nothing needs a receipt.
func (d denyAll) Take(ctx context.Context, key string, n int64) (Result, Receipt, error) {
	res, err := d.Check(ctx, key, n)
	return res, Receipt{}, err
}

// Refund has nothing to take back.
func (denyAll) Refund(string, int64, Receipt) {}

// unlimited is the rule of an Unlimited override (policy.Rule.Tier): every
// check is admitted, counting nothing. Its Result has nothing Remaining;
// the limiter reports a Limit of 0 for it.
type unlimited struct{}

// Check admits.
func (unlimited) Check(context.Context, string, int64) (Result, error) {
	return Result{Allowed: true}, nil
}

// Peek reports the admission.
func (unlimited) Peek(string) Result { return Result{Allowed: true} }

// Tick does nothing.
func (unlimited) Tick(int64) {}

// Sweep has no keys to evict.
func (unlimited) Sweep(int64) int { return 0 }

// SetFleet does nothing.
func (unlimited) SetFleet(int64, bool) {}

// Take is Check: nothing is counted.
func (u unlimited) Take(ctx context.Context, key string, n int64) (Result, Receipt, error) {
	res, err := u.Check(ctx, key, n)
	return res, Receipt{}, err
}

// Refund has nothing to take back.
func (unlimited) Refund(string, int64, Receipt) {}

// newFixed returns the engine of a rule that decides without state: a Deny
// rule, or an Unlimited override's rule (Limit 0 without Deny); ok is false
// for any other rule.
func newFixed(r policy.Rule) (e Engine, ok bool) {
	switch {
	case r.Deny:
		return denyAll{window: r.WindowLength()}, true
	case r.Limit == 0:
		return unlimited{}, true
	}
	return nil, false
}
