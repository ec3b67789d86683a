package localcache

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// WarmTable is the per-key state of a TokenBucket or GCRA rule with a
// WarmUp: window.WarmUp's two numbers (next, in µs, and the stored cold
// permits) packed into one atomic uint64, so that a check stays one map
// load, one load and one compare-and-swap, lock-free and without
// allocation. The packing, and the precision it costs:
//
//   - bits 63..20: next in µs (Guava's clock, so nothing is lost) modulo
//     2^44 µs (about 203 days), read back relative to the check's time. A
//     valid state's next lies at most 3·Burst·T ahead of the time of the
//     check that wrote it (each unit of the burst costs at most the cold
//     interval 3T), and policy.Rule.Validate bounds Burst·T by a day for
//     warm-up rules, so a word that reads further ahead than that plus
//     warmSkew (checks racing on a key can read clocks a little apart) is
//     a next long past that wrapped: it reads as a fresh key. A next in
//     the past reads correctly for up to 2^43 µs (about 101 days) of
//     idling; Sweep evicts every idle key long before (the limiter sweeps
//     at least once a minute).
//   - bits 19..0: the stored permits as a multiple of MaxPermits/warmSteps,
//     rounded to the nearest: Validate bounds MaxPermits (= WarmUp/T) by
//     2^16 intervals, so the step is about 1/16 of a permit (the interval's
//     rounding to the ns can add one permit: 65537/(2^20−4)).
//
// Three values of the low bits are not permits: warmIdle, a key never seen
// (fully cold, no debt: the fresh state), warmGone, evicted by Sweep, and
// warmSeed, a new entry not seeded yet (its first check gives it what the
// table's sketch of untracked keys bounds, keyuntracked.go).
//
// A key the admission rule keeps out of the table is decided on a
// count-min sketch of next times (tatsketch.go), never on shared state.
//
// # The fast paths
//
// A check of one unit decides three states on the word alone, in integer
// arithmetic, without unpacking it and without window.WarmUp.Check's float
// arithmetic (a division for the idle time, the trapezoid of the
// surcharge, the rounding of pack); window.WarmUnit says why each gives
// Check's result bit for bit:
//
//   - denied: next more than Unit.Room ahead of now. Admission is tested on
//     the debt alone, whatever the stored permits, so the check is denied;
//     no cost fits such a debt (Remaining 0), and ResetAfter and
//     RetryAfter follow from the debt. A key over its rate is in this
//     state on every denied check.
//   - warm: no stored permits (low bits 0) and next at or after now, within
//     Unit.Room. The unit is admitted and the new word is the old one plus
//     Unit.Wait in the next field: the low bits stay 0, and the field's
//     addition wraps modulo 2^44 as pack's does. A key used at its stable
//     rate or above is in this state on every admitted check: warm keys
//     pay no surcharge, so this is a plain GCRA.
//   - cold: a fresh word, a next past the horizon (read as fresh), or a
//     next far enough behind now that resync fills the stored permits up
//     to MaxPermits. The unit is admitted and the new word is
//     now + Unit.Cold.Next with the packed Unit.Cold.Stored, both
//     precomputed; Remaining is Unit.ColdRemaining. How far is enough is
//     looked up instead of divided: coldAfter holds, for each of 256 bands
//     of the low bits, WarmUp.ColdAfter of the band's lowest stored
//     permits, which is enough for every permit count of the band (more
//     stored permits fill up sooner), and coldAfterQ the exact idling for
//     the low bits a cold unit leaves (coldQ). A key used below its stable
//     rate is in this state on every check once it has gone cold: each
//     check leaves coldQ, and the idling until the next refills the unit.
//
// Every other check (stored permits being spent while the key warms up, a
// partial refill after a short idle, a cost other than one) goes through
// Check on the unpacked state (check), which is also what the tests hold
// the fast paths to.
type WarmTable struct {
	w     window.WarmUp
	u     window.WarmUnit
	coldQ uint64 // the low bits of Unit.Cold as pack rounds them
	// coldAfter[q>>warmBandShift] is an idling (µs) after which a key
	// whose low bits are q is fully cold; coldAfterQ the shortest one for
	// low bits coldQ, the state of a key after a cold unit.
	coldAfter  [1 << (warmQBits - warmBandShift)]int64
	coldAfterQ int64
	horizon    int64   // µs: the furthest ahead a valid next can be
	scale      float64 // warmSteps/MaxPermits: stored permits to steps
	unit       float64 // MaxPermits/warmSteps: steps to stored permits
	keys       keyed[warmEntry]
	strangers  atomic.Pointer[tatSketch] // untracked keys' next times (µs), allocated on first use
}

type warmEntry struct{ word atomic.Uint64 }

const (
	warmQBits = 20
	warmQMask = 1<<warmQBits - 1
	warmIdle  = warmQMask     // low bits of a fresh key
	warmGone  = warmQMask - 1 // low bits of an evicted key
	warmSeed  = warmQMask - 2 // low bits (and word) of a new entry not seeded yet
	// warmSteps is the stored permits' resolution in a packed state: they
	// are kept as a multiple of MaxPermits/warmSteps (reference.RoundWarm).
	warmSteps = warmQMask - 3
	warmTBits = 64 - warmQBits
	warmTMask = 1<<warmTBits - 1
	// maxWarmPermits bounds window.WarmUnit.MaxPermits (WarmUp/T, which
	// policy.Rule.Validate bounds by MaxWarmUpIntervals whole intervals) so
	// that the step is about 1/16 of a permit.
	maxWarmPermits = policy.MaxWarmUpIntervals + 1
	// maxWarmHorizon is the furthest ahead (µs) a packed next can be read:
	// half the modulus.
	maxWarmHorizon = 1<<(warmTBits-1) - 1
	// warmBandShift divides the low bits into the 256 bands of coldAfter.
	warmBandShift = 12
	// warmSkew is how far apart (µs) the clocks of two checks of one key
	// may read and the later one's state still read as ahead, not as a
	// wrapped past: a check that read the published time just before a
	// tick decides after one that read it just after.
	warmSkew = 1_000_000
)

func newWarmEntry() *warmEntry {
	e := &warmEntry{}
	e.word.Store(warmSeed)
	return e
}

// NewWarmTable returns the table of a rule with the math w, under the key
// bound keys.
func NewWarmTable(w window.WarmUp, keys *Keys) (*WarmTable, error) {
	if keys == nil {
		return nil, fmt.Errorf("%w: Keys is nil", errConfig)
	}
	u := w.Unit()
	if u.MaxPermits > maxWarmPermits {
		return nil, fmt.Errorf("%w: %v stored permits is more than %d", errConfig, u.MaxPermits, maxWarmPermits)
	}
	h := math.Ceil(coldBurst(u)) + 2 + warmSkew
	if !(h < maxWarmHorizon) {
		return nil, fmt.Errorf("%w: a debt of %vµs does not fit the packed state", errConfig, h)
	}
	t := &WarmTable{
		w:       w,
		u:       u,
		horizon: int64(h),
		scale:   warmSteps / u.MaxPermits,
		unit:    u.MaxPermits / warmSteps,
		keys:    newKeyed(keys, newWarmEntry),
	}
	cold, _ := t.pack(t.u.Cold)
	t.coldQ = cold & warmQMask
	for b := range t.coldAfter {
		// The band's lowest stored permits, as unpack reads them.
		t.coldAfter[b] = w.ColdAfter(float64(b<<warmBandShift) * t.unit)
	}
	t.coldAfterQ = w.ColdAfter(float64(t.coldQ) * t.unit)
	return t, nil
}

// coldBurst returns the most debt (µs) a key of w can carry: a whole burst
// at the cold interval, 3·Burst·T.
func coldBurst(u window.WarmUnit) float64 {
	return window.ColdFactor * float64(u.Burst) * u.Stable
}

// pack rounds s's stored permits to the step and returns s as a word, and
// s as the word holds it: what reference.RoundWarm returns,
// with the same arithmetic.
func (t *WarmTable) pack(s window.Warm) (uint64, window.Warm) {
	q := math.Round(s.Stored * t.scale)
	q = min(max(q, 0), warmSteps)
	s.Stored = q * t.unit
	return uint64(s.Next)&warmTMask<<warmQBits | uint64(q), s
}

// unpack returns the state in word as of now (ns).
func (t *WarmTable) unpack(word uint64, now int64) window.Warm {
	us := usOf(now)
	d, fresh := t.ahead(word, us)
	if fresh {
		return t.w.Fresh(now)
	}
	return window.Warm{Next: us + d, Stored: float64(word&warmQMask) * t.unit}
}

// ahead returns next − us for the next in word (us in µs), and whether the
// word reads as a fresh key: warmIdle, or a next further ahead than the
// horizon (a next long past that wrapped).
func (t *WarmTable) ahead(word uint64, us int64) (d int64, fresh bool) {
	d = int64((word>>warmQBits - uint64(us)) & warmTMask)
	if d > maxWarmHorizon {
		d -= 1 << warmTBits
	}
	return d, word&warmQMask == warmIdle || d > t.horizon
}

// usOf returns now (ns) in whole µs, rounded down (negative times too).
func usOf(now int64) int64 {
	us := now / 1000
	if now%1000 < 0 {
		us--
	}
	return us
}

// Allow decides cost n for key at now and records it if admitted.
func (t *WarmTable) Allow(key string, now, n int64) verdict.Outcome {
	e := t.keys.lookup(key)
	if e == nil {
		return t.untracked(key, now, n)
	}
	us := usOf(now)
	for {
		word := e.word.Load()
		q := word & warmQMask
		if q-warmSeed <= warmGone-warmSeed { // warmSeed or warmGone
			e = t.settle(e, key, word, now)
			continue
		}
		d, fresh := t.ahead(word, us)
		switch {
		case n != 1:
		case fresh || (d < 0 && (-d >= t.coldAfter[q>>warmBandShift] || q == t.coldQ && -d >= t.coldAfterQ)):
			next := us + t.u.Cold.Next
			if e.word.CompareAndSwap(word, uint64(next)&warmTMask<<warmQBits|t.coldQ) {
				return verdict.Outcome{Allowed: true, Remaining: t.u.ColdRemaining, ResetAfter: resetAfter(next, now)}
			}
			continue
		case d > t.u.Room:
			// Denied whatever the stored permits: the test is on the debt.
			// No cost fits a debt above Room, so Remaining is 0.
			return verdict.Outcome{ResetAfter: resetAfter(us+d, now), RetryAfter: resetAfter(us+d-t.u.Room, now)}
		case q == 0 && d >= 0:
			// The next field's addition wraps modulo 2^44 as pack's does.
			if e.word.CompareAndSwap(word, word+uint64(t.u.Wait)<<warmQBits) {
				debt := d + t.u.Wait
				rem, ok := t.u.Remaining(debt)
				if !ok {
					rem = t.w.Remaining(window.Warm{Next: us + debt}, now)
				}
				return verdict.Outcome{Allowed: true, Remaining: rem, ResetAfter: resetAfter(us+debt, now)}
			}
			continue
		}
		nw, o := t.check(word, now, n)
		// Rounding the stored permits leaves next, and so Remaining and
		// ResetAfter, as they are.
		if !o.Allowed || e.word.CompareAndSwap(word, nw) {
			return o
		}
	}
}

// resetAfter returns the time from now (ns) until next (µs), or 0 if it has
// passed.
func resetAfter(next, now int64) time.Duration {
	return time.Duration(max(next*1000-now, 0))
}

// check is Allow's general path: window.WarmUp.Check on the unpacked word,
// and the new word if admitted.
func (t *WarmTable) check(word uint64, now, n int64) (uint64, verdict.Outcome) {
	next, ok, rem, reset, retry := t.w.Check(t.unpack(word, now), now, n)
	if !ok {
		return word, verdict.Outcome{Remaining: rem, ResetAfter: reset, RetryAfter: retry}
	}
	nw, _ := t.pack(next)
	return nw, verdict.Outcome{Allowed: true, Remaining: rem, ResetAfter: reset}
}

// settle returns the entry to decide key on in place of e, whose word is
// a sentinel: e seeded, or a fresh entry if e is gone.
func (t *WarmTable) settle(e *warmEntry, key string, word uint64, now int64) *warmEntry {
	if word&warmQMask == warmGone {
		return t.keys.replace(e, key)
	}
	t.seed(e, key, now)
	return e
}

// Peek returns what a check of one unit would see at now.
func (t *WarmTable) Peek(key string, now int64) verdict.Outcome {
	var s window.Warm
	tracked := false
	if e, ok := t.keys.m.Load(key); ok {
		if word := e.word.Load(); word&warmQMask != warmGone && word&warmQMask != warmSeed {
			s, tracked = t.unpack(word, now), true
		}
	}
	if !tracked { // untracked, not seeded yet, or gone: as the sketch bounds it
		s, _ = t.estimated(key, now)
	}
	rem := t.w.Remaining(s, now)
	return verdict.Outcome{Allowed: rem >= 1, Remaining: rem, ResetAfter: t.w.ResetAfter(s, now)}
}

// Sweep evicts the keys that are fully cold and without debt at now: the
// state of a key never seen.
func (t *WarmTable) Sweep(now int64) (removed int) {
	t.keys.m.Range(func(key string, e *warmEntry) bool {
		word := e.word.Load()
		if q := word & warmQMask; q != warmGone && q != warmSeed && t.w.Idle(t.unpack(word, now), now) && e.word.CompareAndSwap(word, warmGone) {
			t.keys.remove(key, e)
			removed++
		}
		return true
	})
	return removed
}
