package localcache

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// How a KeyTable decides a key it does not track (one the admission rule
// keeps out, keyed.go). There is no shared entry: each such key is decided
// on the table's own sketch of untracked keys, allocated at the table's
// first such decision, and the sketch never admits a key beyond what its
// own exact state would.
//
//   - GCRATable: a sketch of TATs (tatsketch.go), decided with window.GCRA
//     on the key's estimate; every admission is one window.GCRA on the
//     key's own admissions makes (proof there).
//   - WarmTable: the same sketch, in window.WarmUp's µs. A check is
//     admitted if WarmUp's own test admits it on the estimate (the debt
//     max(next − now, 0) + n·T ≤ Burst·T, at the stable interval T), and an
//     admission moves the estimate by ⌈3·n·T⌉, ColdFactor times the stable
//     cost: what n units cost a fully cold key, at least what they cost the
//     key whatever its stored permits (WarmUp's interval is at most 3T
//     everywhere, and it truncates). The invariant of tatsketch.go then
//     holds with TAT(x) the next of window.WarmUp run on x's admissions (the
//     estimate rises at least as much as that next, and the test is
//     monotone in the debt), so every admission is one the exact warm-up
//     makes too. The cost: an untracked key runs at its cold rate, a third
//     of Limit per Window, with about Burst/3 at once.
//   - LogTable: a windowed count-min sketch (winsketch.go) over
//     logSketchBuckets sub-windows counted whole, whose window is at least
//     the rule's: its estimate of a key is at least the key's own units in
//     the real window, so it admits what the exact log admits, or less.
//
// A key entering the table carries its sketch state, so that its bucket or
// its window does not restart: its entry is seeded, at its first check,
// with the sketch's estimate. For a GCRATable that is the key's whole
// state, at least its own TAT, and window.GCRA is monotone in its TAT: from
// the seed the table admits no more than the exact bucket would have. For a
// LogTable each sub-window's count (the smallest of its cells, at least
// the key's own) becomes that many timestamps at the sub-window's last
// nanosecond, or now for the current one: no earlier than the units they
// stand for, so they stay in the window at least as long, and at most
// Limit of them, the newest; the log is monotone in that order too. For a
// WarmTable the entry gets the estimate's debt and starts fully cold, as a
// fresh key does. Guava's warm-up is not monotone in its state (a key kept
// busy stays warm, and a warm key refills faster than a cold one), so no
// seed built from an upper bound can promise to admit no more than the
// exact warm-up would; what the seeded key keeps is the bound every
// WarmUp key has, Burst + r·τ over any interval of length τ at the stable
// rate r = 1/T, sketch and table together (both charge at least T per
// unit and test the stable debt).
//
// The race this seeding closes: a check decided on the sketch looks the
// key up again once its admission is in the sketch. If the key has an
// entry now, the check either seeds it (its seed is read after the
// admission, so it holds it), or, when it is seeded already, records the
// admission in the entry with the table's exact math, and is denied if the
// entry denies it (its trace in the sketch stays: conservative). If the key
// has no entry, any entry it gets later is seeded after the admission.
// Either way the entry's state is at least what was admitted.

// sketch returns t's sketch of untracked keys, allocating it on first use.
func (t *GCRATable) sketch() *tatSketch { return loadTATSketch(&t.strangers, t.keys.keys) }

// estimate returns key's TAT as the sketch bounds it, or tatFresh.
func (t *GCRATable) estimate(key string) int64 {
	if s := t.strangers.Load(); s != nil {
		return s.estimate(key)
	}
	return tatFresh
}

// seed gives e, if it is still unseeded, the sketch's estimate of key's
// TAT; it returns that TAT and whether this call seeded e.
func (t *GCRATable) seed(e *gcraEntry, key string) (int64, bool) {
	tat := t.estimate(key)
	return tat, e.tat.CompareAndSwap(tatSeed, tat)
}

// untracked decides cost n at now for key, which t does not track.
func (t *GCRATable) untracked(key string, now, n int64) verdict.Outcome {
	s := t.sketch()
	c := s.cellsOf(key)
	for {
		est := c.estimate()
		next, ok := t.g.Admit(est, now, n)
		if !ok {
			return t.denied(est, now, n)
		}
		if s.commit(&c, next) {
			if o, ok := t.carry(key, now, n); ok {
				return o
			}
			return t.admitted(next, now)
		}
		s.read(&c)
	}
}

// carry records in key's entry, if key has got one since its check found
// none, the admission of n at now that the sketch has just committed, and
// returns the entry's decision; ok is false if key has no live entry (the
// admission stands on the sketch).
func (t *GCRATable) carry(key string, now, n int64) (o verdict.Outcome, ok bool) {
	e, found := t.keys.m.Load(key)
	if !found {
		return verdict.Outcome{}, false
	}
	for {
		tat := e.tat.Load()
		switch tat {
		case tatGone:
			return verdict.Outcome{}, false
		case tatSeed:
			// This seed is read after the admission: it holds it. If
			// another check seeded e first, its seed may not: the next
			// turn records the admission in e.
			if est, ok := t.seed(e, key); ok {
				return t.admitted(est, now), true
			}
			continue
		}
		next, admit := t.g.Admit(tat, now, n)
		if !admit {
			return t.denied(tat, now, n), true
		}
		if e.tat.CompareAndSwap(tat, next) {
			return t.admitted(next, now), true
		}
	}
}

// sketch returns t's sketch of untracked keys, allocating it on first use.
func (t *WarmTable) sketch() *tatSketch { return loadTATSketch(&t.strangers, t.keys.keys) }

// coldCost returns what the sketch charges for n units, in µs: ⌈3·n·T⌉,
// rounded up past the float error of WarmUp's own costs.
func (t *WarmTable) coldCost(n int64) int64 {
	return int64(math.Ceil(window.ColdFactor * float64(n) * t.u.Stable * (1 + 1e-9)))
}

// estimated returns key's state at now as the sketch bounds it: its
// estimated next (µs) and fully cold, or, with fresh true, a fresh key's
// state if the estimate is not ahead of now.
func (t *WarmTable) estimated(key string, now int64) (st window.Warm, fresh bool) {
	f := t.w.Fresh(now)
	s := t.strangers.Load()
	if s == nil {
		return f, true
	}
	next := s.estimate(key)
	if next <= f.Next {
		return f, true
	}
	// A valid estimate is at most 3·Burst·T ahead of the time of the check
	// that wrote it; horizon has room for a skew between checks' clocks.
	return window.Warm{Next: min(next, f.Next+t.horizon), Stored: t.u.MaxPermits}, false
}

// seed gives e, if it is still unseeded, the state the sketch bounds for
// key at now; it returns that state and whether this call seeded e.
func (t *WarmTable) seed(e *warmEntry, key string, now int64) (window.Warm, bool) {
	st, fresh := t.estimated(key, now)
	w := uint64(warmIdle)
	if !fresh {
		w, st = t.pack(st)
	}
	return st, e.word.CompareAndSwap(warmSeed, w)
}

// untracked decides cost n at now for key, which t does not track.
func (t *WarmTable) untracked(key string, now, n int64) verdict.Outcome {
	s := t.sketch()
	c := s.cellsOf(key)
	us := t.w.Fresh(now).Next
	for {
		st := window.Warm{Next: c.estimate(), Stored: t.u.MaxPermits}
		if !warmFits(&t.u, warmDebt(st.Next, us), n) {
			// Check decides the same; it is asked only for a denial's
			// Remaining, ResetAfter and RetryAfter.
			_, _, rem, reset, retry := t.w.Check(st, now, n)
			return verdict.Outcome{Remaining: rem, ResetAfter: reset, RetryAfter: retry}
		}
		st.Next = max(st.Next, us) + t.coldCost(n)
		if s.commit(&c, st.Next) {
			if o, ok := t.carry(key, now, n); ok {
				return o
			}
			return verdict.Outcome{Allowed: true, Remaining: t.w.Remaining(st, now), ResetAfter: t.w.ResetAfter(st, now)}
		}
		s.read(&c)
	}
}

// warmFits is window.WarmUp.Check's admission test for cost n on a key
// with debt µs (Next − now, at least 0) under the WarmUp whose unit is u: n
// in [0, Burst] and debt ≤ (Burst − n)·T, in the same float arithmetic, so
// it decides as Check does without Check's take step (a restatement of
// window's fits and debt: the untracked warm-up tests pin the two equal).
func warmFits(u *window.WarmUnit, debt, n int64) bool {
	return n >= 0 && n <= u.Burst && float64(debt) <= float64(u.Burst-n)*u.Stable
}

// warmDebt returns max(next − us, 0) µs, saturated at 2^50 (far past any
// room, as window's own debt is) so that no difference overflows.
func warmDebt(next, us int64) int64 {
	if next <= us {
		return 0
	}
	return int64(min(uint64(next)-uint64(us), 1<<50))
}

// carry is GCRATable.carry for a WarmTable.
func (t *WarmTable) carry(key string, now, n int64) (verdict.Outcome, bool) {
	e, found := t.keys.m.Load(key)
	if !found {
		return verdict.Outcome{}, false
	}
	for {
		word := e.word.Load()
		switch word & warmQMask {
		case warmGone:
			return verdict.Outcome{}, false
		case warmSeed:
			if st, ok := t.seed(e, key, now); ok {
				return verdict.Outcome{Allowed: true, Remaining: t.w.Remaining(st, now), ResetAfter: t.w.ResetAfter(st, now)}, true
			}
			continue
		}
		if nw, o := t.check(word, now, n); !o.Allowed || e.word.CompareAndSwap(word, nw) {
			return o, true
		}
	}
}

// sketch returns t's sketch of untracked keys, allocating it on first use.
func (t *LogTable) sketch() *winSketch {
	if s := t.strangers.Load(); s != nil {
		return s
	}
	t.strangers.CompareAndSwap(nil, newWinSketch(t.geo, winWidth(t.keys.keys.max), t.geo.Span()))
	return t.strangers.Load()
}

// sketchRoom returns how many units key has left at now as the sketch
// counts it: Limit if there is no sketch.
func (t *LogTable) sketchRoom(key string, now int64) int64 {
	if s := t.strangers.Load(); s != nil {
		return max0(s.room(key, now, t.limit))
	}
	return t.limit
}

// sketchReset is the ResetAfter of a key without an entry at now: until
// the newest bucket the sketch counts for it leaves the sketch's window (0
// if none, or no sketch).
func (t *LogTable) sketchReset(key string, now int64) time.Duration {
	if s := t.strangers.Load(); s != nil {
		return s.resetAt(key, now)
	}
	return 0
}

// untracked decides cost n at now for key, which t does not track.
func (t *LogTable) untracked(key string, now, n int64) verdict.Outcome {
	s := t.sketch()
	if n < 1 || n > t.limit {
		rem := t.sketchRoom(key, now)
		return verdict.Outcome{Remaining: rem, ResetAfter: t.sketchReset(key, now), RetryAfter: -1}
	}
	v := s.decide(key, now, n, t.limit)
	if v.Status != verdict.Allowed {
		return verdict.Outcome{Remaining: v.Remaining, ResetAfter: max(s.resetAt(key, now), v.RetryAfter), RetryAfter: v.RetryAfter}
	}
	if o, ok := t.carry(key, now, n); ok {
		if !o.Allowed {
			s.takeBack(key, now, n) // the entry denied it
		}
		return o
	}
	return verdict.Outcome{Allowed: true, Remaining: v.Remaining, ResetAfter: t.geo.ResetAfter(now)}
}

// carry is GCRATable.carry for a LogTable.
func (t *LogTable) carry(key string, now, n int64) (verdict.Outcome, bool) {
	e, found := t.keys.m.Load(key)
	if !found {
		return verdict.Outcome{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch e.state {
	case logGone:
		return verdict.Outcome{}, false
	case logUnseeded:
		t.seed(e, key, now) // read after the admission: it holds it
		now = max(now, e.last)
		t.expire(e, now)
		return verdict.Outcome{Allowed: true, Remaining: t.limit - int64(e.size), ResetAfter: t.reset(e, now)}, true
	}
	return t.decide(e, now, n), true
}

// seed fills e, an unseeded entry of key (locked), with what the sketch
// counted for key in the window at now, and makes it live: each
// sub-window's count as that many timestamps at its last nanosecond (now
// for the current one), at most Limit of them, the newest.
func (t *LogTable) seed(e *logEntry, key string, now int64) {
	e.state = logLive
	s := t.strangers.Load()
	if s == nil {
		return
	}
	var c [logSketchBuckets + 1]int64 // oldest first
	k := t.geo.Index(now)
	b := s.bases(key)
	var total int64
	for i := range c {
		c[i] = s.keyCount(b, k-logSketchBuckets+int64(i))
		total += c[i]
	}
	for i := 0; total > t.limit; i++ {
		d := min(c[i], total-t.limit)
		c[i] -= d
		total -= d
	}
	if total == 0 {
		return
	}
	t.grow(e, int(total))
	for i, ci := range c {
		ts := min((k-logSketchBuckets+int64(i)+1)*t.geo.Sub()-1, now)
		for ; ci > 0; ci-- {
			e.ring[e.index(e.size)] = ts
			e.size++
			e.last = ts
		}
	}
}
