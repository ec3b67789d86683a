package localcache

import (
	"fmt"
	"math"
	"sync/atomic"

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
//   - bits 19..0: the stored permits as a multiple of MaxPermits/WarmSteps,
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
type WarmTable struct {
	w         window.WarmUp
	horizon   int64   // µs: the furthest ahead a valid next can be
	scale     float64 // WarmSteps/MaxPermits: stored permits to steps
	unit      float64 // MaxPermits/WarmSteps: steps to stored permits
	keys      keyed[warmEntry]
	strangers atomic.Pointer[tatSketch] // untracked keys' next times (µs), allocated on first use
}

type warmEntry struct{ word atomic.Uint64 }

const (
	warmQBits = 20
	warmQMask = 1<<warmQBits - 1
	warmIdle  = warmQMask     // low bits of a fresh key
	warmGone  = warmQMask - 1 // low bits of an evicted key
	warmSeed  = warmQMask - 2 // low bits (and word) of a new entry not seeded yet
	// WarmSteps is the stored permits' resolution in a packed state: they
	// are kept as a multiple of MaxPermits/WarmSteps (window.WarmUp.Round).
	WarmSteps = warmQMask - 3
	warmTBits = 64 - warmQBits
	warmTMask = 1<<warmTBits - 1
	// MaxWarmPermits bounds window.WarmUp.MaxPermits (WarmUp/T, which
	// policy.Rule.Validate bounds by MaxWarmUpIntervals whole intervals) so
	// that the step is about 1/16 of a permit.
	MaxWarmPermits = policy.MaxWarmUpIntervals + 1
	// maxWarmHorizon is the furthest ahead (µs) a packed next can be read:
	// half the modulus.
	maxWarmHorizon = 1<<(warmTBits-1) - 1
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
		return nil, fmt.Errorf("%w: Keys is nil", ErrConfig)
	}
	if w.MaxPermits() > MaxWarmPermits {
		return nil, fmt.Errorf("%w: %v stored permits is more than %d", ErrConfig, w.MaxPermits(), MaxWarmPermits)
	}
	h := math.Ceil(ColdBurst(w)) + 2 + warmSkew
	if !(h < maxWarmHorizon) {
		return nil, fmt.Errorf("%w: a debt of %vµs does not fit the packed state", ErrConfig, h)
	}
	return &WarmTable{
		w:       w,
		horizon: int64(h),
		scale:   WarmSteps / w.MaxPermits(),
		unit:    w.MaxPermits() / WarmSteps,
		keys:    newKeyed(keys, newWarmEntry),
	}, nil
}

// ColdBurst returns the most debt (µs) a key of w can carry: a whole burst
// at the cold interval, 3·Burst·T.
func ColdBurst(w window.WarmUp) float64 {
	return window.ColdFactor * float64(w.Burst()) * w.Stable()
}

// pack rounds s's stored permits to the step and returns s as a word, and
// s as the word holds it: what window.WarmUp.Round(s, WarmSteps) returns,
// with the same arithmetic.
func (t *WarmTable) pack(s window.Warm) (uint64, window.Warm) {
	q := math.Round(s.Stored * t.scale)
	q = min(max(q, 0), WarmSteps)
	s.Stored = q * t.unit
	return uint64(s.Next)&warmTMask<<warmQBits | uint64(q), s
}

// unpack returns the state in word as of now (ns).
func (t *WarmTable) unpack(word uint64, now int64) window.Warm {
	q := word & warmQMask
	if q == warmIdle {
		return t.w.Fresh(now)
	}
	us := now / 1000
	if now%1000 < 0 {
		us--
	}
	d := int64((word>>warmQBits - uint64(us)) & warmTMask)
	if d > maxWarmHorizon {
		d -= 1 << warmTBits
	}
	if d > t.horizon {
		return t.w.Fresh(now) // a next long past that wrapped
	}
	return window.Warm{Next: us + d, Stored: float64(q) * t.unit}
}

// Allow decides cost n for key at now and records it if admitted.
func (t *WarmTable) Allow(key string, now, n int64) Outcome {
	e := t.keys.lookup(key)
	if e == nil {
		return t.untracked(key, now, n)
	}
	for {
		word := e.word.Load()
		if word&warmQMask-warmSeed <= warmGone-warmSeed { // warmSeed or warmGone
			e = t.settle(e, key, word, now)
			continue
		}
		next, ok, rem, reset, retry := t.w.Check(t.unpack(word, now), now, n)
		if !ok {
			return Outcome{Remaining: rem, ResetAfter: reset, RetryAfter: retry}
		}
		// Rounding the stored permits leaves next.Next, and so rem and
		// reset, as they are.
		if nw, _ := t.pack(next); e.word.CompareAndSwap(word, nw) {
			return Outcome{Allowed: true, Remaining: rem, ResetAfter: reset}
		}
	}
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
func (t *WarmTable) Peek(key string, now int64) Outcome {
	var s window.Warm
	tracked := false
	if e, ok := t.keys.m.Load(key); ok {
		if word := e.word.Load(); word&warmQMask != warmGone && word&warmQMask != warmSeed {
			s, tracked = t.unpack(word, now), true
		}
	}
	if !tracked { // untracked, not seeded yet, or gone: as the sketch bounds it
		s = t.estimated(key, now)
	}
	rem := t.w.Remaining(s, now)
	return Outcome{Allowed: rem >= 1, Remaining: rem, ResetAfter: t.w.ResetAfter(s, now)}
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

// Len returns the number of keys tracked.
func (t *WarmTable) Len() int { return t.keys.Len() }
