package window

// Micros is micros, for the external tests.
var Micros = micros

// WarmAdmit is w.admit, for the external tests.
func WarmAdmit(w WarmUp, s Warm, t, n int64) (Warm, bool) { return w.admit(s, t, n) }
