package sluice

import "errors"

// Soft and shadow rules (policy.Rule.Soft, policy.Rule.Shadow) are shaped
// here, after the engine decided: the engine of a soft rule counts to
// Limit·(1+Soft), the Decision speaks of Limit; a shadow rule's denial is
// turned into an admission that says what it would have been.

// shape turns an engine's decision for r into the rule's: Remaining less
// the soft band (never below 0), and a shadow rule's denial into an
// admission with its RetryAfter kept (Decision.Shadowed). A shadow rule's
// store failure under [policy.FailClosed] admits too: a dry run never denies.
func (r *rule) shape(d Decision, err error) (Decision, error) {
	if d.Allowed && d.Remaining < r.extra {
		// The admission took the count past Limit: into the band.
		d.soft = true
	}
	d.Remaining = max(d.Remaining-r.extra, 0)
	if !r.shadow || d.Allowed {
		return d, err
	}
	if err != nil && !errors.Is(err, ErrStoreUnavailable) {
		return d, err
	}
	d.Allowed = true
	if d.RetryAfter <= 0 {
		d.RetryAfter = max(d.ResetAfter, 1)
	}
	return d, nil
}

// boolInt is 1 for true: for one test of several flags on the hot path.
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
