package window

// WarmUnit is the constants of a WarmUp that a table of its states reads:
// its capacity, T and the stored permits of a cold key, and what a check of
// one unit needs to decide, in integer arithmetic, the states in which a
// WarmUp costs no more than a plain GCRA. WarmUp.Unit computes it with the
// WarmUp's own functions, so that a caller deciding those states with it
// gets Check's results bit for bit:
//
//   - Any state with a debt (Next − now, in µs) above Room: one unit is
//     denied, whatever the stored permits, since the admission test is on
//     the debt alone; no cost fits (Remaining is 0).
//   - No stored permits and no idling (Stored = 0, Next ≥ now), debt at
//     most Room: resync does nothing, no stored permit is taken, and the
//     unit costs Wait = ⌊1·T⌋ (Guava's fresh permits): the new state is
//     {Next + Wait, 0}, a GCRA on Next. This is the state of a key used at
//     its stable rate or above: warm keys pay no surcharge.
//   - Fully cold: a key never seen, or one idle long enough that resync
//     fills its stored permits up to MaxPermits (WarmUp.ColdAfter). Resync
//     then gives {now, MaxPermits} whatever the state was, no debt, so the
//     unit is admitted (1 ≤ Burst) and the new state is Cold moved to now:
//     {now + Cold.Next, Cold.Stored}. This is the state of a key used below
//     its stable rate once it has gone cold, every check a cold one.
//
// Every other state (stored permits being spent, a partial refill, a cost
// other than one unit) needs the float arithmetic of Check.
type WarmUnit struct {
	// Room is the most debt (µs) with which one unit is admitted:
	// ⌊(Burst − 1)·T⌋. A debt above it admits no cost at all.
	Room int64
	// Wait is what one unit adds to Next (µs) on a key with no stored
	// permits: ⌊T⌋.
	Wait int64
	// Cold is the state after one unit on a fully cold key at 0µs: Next is
	// the unit's wait (up to 3T, truncated to the µs as Guava truncates
	// it), Stored the permits left. The wait does not depend on Next, so
	// at any now the state is {now + Cold.Next, Cold.Stored}.
	Cold Warm
	// ColdRemaining is Remaining after Cold: a cost of up to this is
	// admitted right after the cold unit.
	ColdRemaining int64
	// Burst is the capacity, in units. NewWarmUp sets it, through Unit; a
	// caller must not change it (Remaining reads it).
	Burst int64
	// Stable is T, the stable interval, in µs. NewWarmUp sets it, through
	// Unit; a caller must not change it.
	Stable float64
	// MaxPermits is the stored permits of a fully cold key. NewWarmUp sets
	// it, through Unit; a caller must not change it.
	MaxPermits float64

	whole uint64 // WarmUp's: T when Remaining is one integer division
}

// Unit returns w's WarmUnit.
func (w WarmUp) Unit() WarmUnit {
	u := WarmUnit{
		Room:       w.room(1),
		Wait:       w.take(Warm{}, 0, 1).Next,
		Cold:       w.take(Warm{Stored: w.maxP}, 0, 1),
		Burst:      w.burst,
		Stable:     w.stable,
		MaxPermits: w.maxP,
		whole:      w.whole,
	}
	u.ColdRemaining = w.remaining(u.Cold.Next)
	return u
}

// ColdAfter returns the shortest idling, in µs (now − Next), after which a
// key that stored the given permits is fully cold: the smallest d ≥ 1 for
// which resync's min(MaxPermits, stored + d/coolDownInterval), in float64
// as resync computes it, is MaxPermits. A longer idling is fully cold too,
// and so is the same idling from more stored permits: float division and
// addition are monotone. About the warm-up period from no stored permits,
// down to a cool-down interval from MaxPermits − 1.
func (w WarmUp) ColdAfter(stored float64) int64 {
	full := func(d int64) bool { return w.resync(Warm{Stored: stored}, d).Stored >= w.maxP }
	// The answer is in (lo, hi] once full(hi): full is monotone.
	lo, hi := int64(0), max(2*int64(w.maxP*w.cool)+2, 1)
	for !full(hi) {
		lo, hi = hi, 2*hi
	}
	for hi-lo > 1 {
		if m := lo + (hi-lo)/2; full(m) {
			hi = m
		} else {
			lo = m
		}
	}
	return hi
}

// Remaining returns, for a key whose debt is debt µs (max(Next − now, 0)),
// WarmUp.Remaining (the largest n ≤ Burst with debt ≤ ⌊(Burst − n)·T⌋, or
// 0) and true when that is one integer division (T a whole number of µs,
// see WarmUp.remaining), which it is small enough to be inlined for; else
// 0 and false: WarmUp.Remaining of a state with Next debt µs ahead tells.
func (u *WarmUnit) Remaining(debt int64) (int64, bool) {
	if u.whole == 0 {
		return 0, false
	}
	return wholeRemaining(u.Burst, u.whole, max(debt, 0)), true
}
