package sluice

import (
	"time"

	"github.com/sluicehq/sluice/internal/engine"
)

// Decision is the result of a check (Allow, AllowN, AllowAll), or what a
// check would see (Peek). A denial is a Decision with Allowed false and a
// nil error.
type Decision struct {
	// Allowed reports whether the cost was admitted and counted.
	Allowed bool
	// soft: admitted past Limit, in the rule's soft band (InSoftBand).
	soft bool
	// Limit is the limit per window in force for the key: its override
	// tier's, else the rule's, as the rules are now (after SetRules or a
	// WatchFile reload); 0 for an Unlimited tier and for a Deny rule or
	// tier (Unlimited, Blocked).
	Limit int64
	// Remaining is what the window has left as this instance sees it: its
	// own admissions plus the fleet's totals as of its last sync; never
	// above the exact room, and at most the error budget away from the
	// fleet's. For a TokenBucket or GCRA it is the whole tokens left: the
	// largest cost admitted now.
	Remaining int64
	// ResetAfter is how long until the key's quota is whole again (Limit
	// remaining, as this instance sees it) if nothing more is admitted; 0
	// if it is whole now. While nothing more is admitted, now+ResetAfter
	// never moves later, and on a denial it is never before RetryAfter.
	//
	// For a sliding or weighted window it is until the newest sub-window
	// holding a count has left the window: after an admission, the window
	// plus the rest of the current sub-window, so it can exceed Window (a
	// 1-minute rule with 10 sub-windows can say up to 1m6s). For a fixed
	// window it is the end of the window, if it holds a count; for a
	// SlidingLog until the newest unit leaves; for a TokenBucket or GCRA
	// until the bucket is full again. A Deny rule's denials (Blocked) have
	// no reset: ResetAfter and RetryAfter are its Window, a hint only.
	ResetAfter time.Duration
	// RetryAfter is 0 when allowed; otherwise how long until a retry of the
	// same cost can succeed, if nothing else is admitted meanwhile (round it
	// up to whole seconds for an HTTP Retry-After). A shadow rule's
	// admission that it would have denied has one too (Shadowed).
	RetryAfter time.Duration
}

// decision is an engine's result as the Decision of a rule whose limit is
// limit.
func decision(res engine.Result, limit int64) Decision {
	return Decision{Allowed: res.Allowed, Limit: limit, Remaining: res.Remaining, ResetAfter: res.ResetAfter, RetryAfter: res.RetryAfter}
}

// Shadowed reports whether a shadow rule (policy.Rule.Shadow) admitted the
// check only because it never denies: the rule would have denied it. Such a
// Decision is Allowed with a RetryAfter above 0 (when the rule would have
// retried it), which no other admission has; Remaining is 0 or what the
// window has left, as for a denial.
func (d Decision) Shadowed() bool { return d.Allowed && d.RetryAfter > 0 }

// InSoftBand reports whether the check was admitted past the rule's Limit,
// in its soft band (policy.Rule.Soft): the key is over its limit and is
// denied once the band is used up. A caller can warn the client before it
// is limited. Remaining is 0 for such an admission.
func (d Decision) InSoftBand() bool { return d.soft }

// Unlimited reports whether the check was decided by an Unlimited override
// (policy.Override.Unlimited): admitted, with no limit (Limit 0) and
// nothing counted. There is no quota to advertise.
func (d Decision) Unlimited() bool { return d.Allowed && d.Limit == 0 }

// Blocked reports whether the check was denied outright, by a Deny rule or
// a Deny override (policy.Rule.Deny, policy.Override.Deny): Limit 0 and
// not Allowed. No wait lifts such a denial (only a change of the rules),
// so its RetryAfter, the rule's Window, is a hint only; an HTTP front door
// answers it without a Retry-After.
func (d Decision) Blocked() bool { return !d.Allowed && d.Limit == 0 }
