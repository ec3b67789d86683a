package engine

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

// SoftBand returns d marked as admitted in the soft band
// (Decision.InSoftBand); the limiter shapes a soft rule's decisions with
// it.
func SoftBand(d Decision) Decision {
	d.soft = true
	return d
}

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
