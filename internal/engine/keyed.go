package engine

import (
	"fmt"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
)

// keyClock is what the Local engines of the per-key algorithms
// (TokenBucket, GCRA, SlidingLog: a tableport.KeyTable each) share: the
// time a check is decided at. They decide in this process only, so a fleet
// view does not concern them.
type keyClock struct {
	now    func() int64
	ticked bool
	pub    atomic.Int64 // the time of the last Tick
}

// init sets c up for cfg's clock.
func (c *keyClock) init(cfg Config) {
	c.now, c.ticked = cfg.Now, cfg.Ticked
	c.pub.Store(cfg.Now())
}

// time returns the time a check is decided at: the published time, or the
// clock.
func (c *keyClock) time() int64 {
	if c.ticked {
		return c.pub.Load()
	}
	return c.now()
}

// Tick publishes now for checks on the published time.
func (c *keyClock) Tick(now int64) { c.pub.Store(now) }

// SetFleet does nothing: a Local rule does not share its keys.
func (c *keyClock) SetFleet(int64, bool) {}

// result turns a KeyTable's outcome into a Result: a RetryAfter of "never"
// (-1, a cost the key can never admit, which the limiter refuses before it
// gets here) becomes the ResetAfter, the best hint there is.
func result(o verdict.Outcome) Result {
	return Result{Allowed: o.Allowed, Remaining: o.Remaining, ResetAfter: o.ResetAfter, RetryAfter: retry(o.RetryAfter, o.ResetAfter)}
}

// peek is Peek for a KeyTable, on the clock (a Peek is rare; it reads the
// time).
func peek(t tableport.KeyTable, c *keyClock, key string) Result {
	return result(t.Peek(key, c.now()))
}

// supported refuses a mode the per-key algorithms do not have: Eventual for
// a SlidingLog, and any but Local for a WarmUp. policy.Rule.Validate
// refuses them first, with the reasons; this is the engine's own guard.
func supported(r policy.Rule) error {
	eventual := r.Mode == policy.Eventual && r.Algorithm != policy.SlidingLog
	if r.Mode != policy.Local && r.Mode != policy.Strict && !eventual {
		return fmt.Errorf("%w %q: Algorithm %v supports Mode policy.Local and policy.Strict, not %v: set Mode: policy.Local or policy.Strict", policy.ErrInvalidRule, r.Name, r.Algorithm, r.Mode)
	}
	if r.WarmUp > 0 && r.Mode != policy.Local {
		return fmt.Errorf("%w %q: a WarmUp supports only Mode policy.Local, not %v: set Mode: policy.Local, or remove WarmUp", policy.ErrInvalidRule, r.Name, r.Mode)
	}
	return nil
}

// ruleError wraps a table's refusal of a rule that passed Validate.
func ruleError(r policy.Rule, err error) error {
	return fmt.Errorf("%w %q: %v", policy.ErrInvalidRule, r.Name, err)
}
