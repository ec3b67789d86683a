package engine

// Shadowed reports whether a shadow rule (policy.Rule.Shadow) admitted the
// check only because it never denies: the rule would have denied it. Such a
// Decision is Allowed with a RetryAfter above 0 (when the rule would have
// retried it), which no other admission has; Remaining is 0 or what the
// window has left, as for a denial.
func (d Decision) Shadowed() bool { return d.Allowed && d.RetryAfter > 0 }
