package policy

// validateInFlight checks an InFlight rule: a Limit in range, no Window,
// none of the rate fields, and a mode that can hold slots (Local, or
// ModeDefault and Strict, which hold them in the store when there is one).
func (r Rule) validateInFlight(bad func(string, ...any) error) error {
	switch {
	case r.Limit < 1 || r.Limit > MaxLimit:
		return bad("Limit %d is out of range: an InFlight rule holds 1 to %d slots per key", r.Limit, int64(MaxLimit))
	case r.Window != 0:
		return bad("Window %v is set on an InFlight rule: a concurrency limit has no window (a slot is held until it is released); remove Window, or remove InFlight for a rate", r.Window)
	case r.Algorithm != SlidingWindow || r.Precision != 0 || r.Burst != 0 || r.WarmUp != 0:
		return bad("an InFlight rule has no Algorithm, Precision, Burst or WarmUp (it counts slots held, not a rate): remove them")
	case r.Soft != 0 || r.Ceiling != 0 || r.Capacity != "" || r.Shadow || r.Deny || len(r.Overrides) != 0:
		return bad("an InFlight rule takes no Soft, Ceiling, Capacity, Shadow, Deny or Overrides: remove them")
	}
	switch r.Mode {
	case ModeDefault, Local, Strict:
	case Eventual:
		return bad("Mode Eventual is refused for an InFlight rule: every fleet-wide slot is taken in the store, one round trip per Acquire; use the default or policy.Strict for that, or policy.Local")
	default:
		return bad("unknown Mode %d: use policy.Local or policy.Strict", r.Mode)
	}
	return nil
}
