package localcache

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/rawmem"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
)

// Allow checks cost n for key at the time of the last Tick, and counts it if
// admitted. The fast path (a tracked key whose cached budget is valid and has
// room, or whose cached denial still holds) costs one map load, two loads and
// one compare-and-swap on the entry, and a load of its state (a cached
// denial reads its Reset too: the ring, from the current bucket back to the
// newest holding a count of the key); anything else takes the slow path,
// which recomputes the budget from the ring. An admission that leaves an
// Eventual key half of its local allowance or less asks for an early sync
// (early.go).
func (t *Table) Allow(key string, n int64) verdict.Verdict {
	p := t.pos.Load()
	if e := t.m.Load(key); e != nil {
		tag := int64(p>>24) & tagMask
		// A budget tagged for this bucket is only stored after the
		// bucket's pend word holds it, so the addition lands there.
		if c, b, added := t.add(e, uintptr(p>>48), tag, n); added {
			rm := roomOf(e.room.Load())
			t.afterAdmit(e, c, b, rm, n)
			return verdict.Verdict{Status: verdict.Allowed, Remaining: max0(rm - c)}
		}
		if n == 1 {
			if rw := e.room.Load(); tagOf(rw) == tag {
				if ra := t.deniedUntil(rw); ra > 0 {
					return verdict.Verdict{Status: verdict.OverLimit, RetryAfter: ra, Reset: t.resetOf(e, t.now.Load())}
				}
			}
		}
	}
	return t.allow(key, n, p, 0, true)
}

// AllowAt checks cost n for key at time now, and counts it if admitted.
func (t *Table) AllowAt(key string, now int64, n int64) verdict.Verdict {
	k := t.geo.Index(now)
	tag := (k + int64(t.gen.Load())) & tagMask
	return t.allow(key, n, t.posWord(k, tag), now, false)
}

// AllowDegraded checks cost n for key at now as if the store were down with
// failure mode m (the caller's, after the store failed it), counting what it
// admits. It leaves cached budgets alone. It never returns OverCap: the cap
// binds only while the store is up.
func (t *Table) AllowDegraded(key string, now int64, n int64, m policy.FailureMode) verdict.Verdict {
	h := healthOf(true, m)
	for {
		// The check that reached the store already counted its sighting
		// of an untracked key (Allow, Ref): this one does not.
		e := t.lookup(key, now, false)
		if e == nil {
			return t.untracked(key, now, n, h)
		}
		if v, ok := t.slow(e, now, n, &h); ok {
			return v
		}
		t.replace(e, key)
	}
}

// allow checks n at position p: on e's cached budget if it is valid, else
// on the slow path; a key the admission rule keeps out is decided as
// untracked. With ticked, the time is the last Tick's; else it is now.
func (t *Table) allow(key string, n int64, p uint64, now int64, ticked bool) verdict.Verdict {
	tag := int64(p>>24) & tagMask
	off := uintptr(p >> 48)
	if ticked {
		now = t.now.Load()
	}
	for {
		e := t.lookup(key, now, true)
		if e == nil {
			return t.untracked(key, now, n, health(t.health.Load()))
		}
		if c, b, ok := t.add(e, off, tag, n); ok {
			rm := roomOf(e.room.Load())
			t.afterAdmit(e, c, b, rm, n)
			return verdict.Verdict{Status: verdict.Allowed, Remaining: max0(rm - c)}
		}
		if v, ok := t.slow(e, now, n, nil); ok {
			return v
		}
		t.replace(e, key) // e is gone: start over on a fresh entry
	}
}

// add adds n to the pend word at offset off of e if e's budget is tagged
// tag and the result stays within it, and brings e into its live state; it
// returns the new count and the budget. It reads the pend word first and the
// budget after it, both again after a failed compare-and-swap: the syncer
// stores a new budget before it lowers a pend word (Settle acknowledging
// counts, Release ending a lease), so a count read after a lowering is held
// to a budget stored for it, never to one that still holds an ended lease.
// A compare-and-swap, not an add and an undo: the syncer may read pend at any
// moment, and must never push a count that is then taken back.
func (t *Table) add(e *hdr, off uintptr, tag, n int64) (c, budget int64, ok bool) {
	pw := rawmem.At[atomic.Uint64](e, off)
	for {
		w := pw.Load()
		bw := e.budget.Load()
		c, budget = countOf(w)+n, countOf(bw)
		if tagOf(bw) != tag || c > budget {
			return 0, 0, false
		}
		if pw.CompareAndSwap(w, w+uint64(n)) {
			if st := e.state.Load(); st != t.ok && !t.settleState(e, st) {
				pw.Add(-uint64(n)) // a gone entry: nobody syncs it any more
				return 0, 0, false
			}
			return c, budget, true
		}
	}
}

func max0(x int64) int64 {
	if x < 0 {
		return 0
	}
	return x
}
