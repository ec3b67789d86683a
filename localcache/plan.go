package localcache

import (
	"math/bits"

	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// view is what a scan of an entry's ring finds, excluding the current
// bucket's pend.
type view struct {
	others window.Estimate // everything but the current pend
	own    window.Estimate // this instance's other pend
	div    int64           // unacknowledged own count in the window's other buckets
}

// scan reads the ring at bucket k (slot s), phase phase. It reads each slot's
// pend before its glob: Settle stores glob before it lowers pend, so a scan can
// count an acknowledged count twice but never miss it.
func (t *Table) scan(e *hdr, k int64, s int, phase float64) (v view) {
	last := t.span - 1
	for i := 0; i < t.span; i++ {
		si := s - i
		if si < 0 {
			si += t.ring
		}
		j := k - int64(i)
		p := countAt(t.pend(e, si).Load(), j)
		// The store counted a lease's units at its grant, so its total of
		// the lease's bucket holds them all: at least the lease, even
		// before a pull has brought that total (a lease granted ahead for
		// this bucket, while the one before was current). What the lease
		// covers is in g: count it once, and not as unacknowledged.
		l := t.leaseAt(e, j)
		g := max(countAt(t.glob(e, si).Load(), j), l)
		u := p - min(p, l)
		switch {
		case i == 0:
			v.others.Whole += g
			continue
		case i == last:
			w := t.geo.OldWeight(phase)
			v.others.Weighted = w * float64(u+g)
			v.own.Weighted = w * float64(p)
		default:
			v.others.Whole += u + g
			v.own.Whole += p
		}
		v.div += u
	}
	return v
}

// rotate makes slot s hold bucket k, dropping what an older bucket left there
// (it is outside the window). It returns false if the slot holds a newer
// bucket: the caller's time is more than a window behind another caller's.
func (t *Table) rotate(e *hdr, k int64, s int) bool {
	for {
		w := t.pend(e, s).Load()
		tag := tagOf(w)
		if tag == k&tagMask {
			return true
		}
		if distance(tag, k) < 0 && countOf(w) != 0 {
			return false
		}
		if t.pend(e, s).CompareAndSwap(w, pack(k, 0)) {
			return true
		}
	}
}

// plan is a freshly computed budget.
type plan struct {
	k, tag         int64
	s              int
	room, budget   int64
	shareBudget    int64 // failLocal only
	fair           int64 // failLocal only: this instance's part of the room (fairShare)
	health         health
	local, rotated bool
	sq             uint32 // the entry's synced count the budget was computed at
}

// plan rotates e to the bucket of now, computes its budget and, unless the
// health is forced, stores it. The room is the admit test's
// (window.Estimate.Room) of the estimate without the current bucket's pend:
// a cost n fits while the current pend plus n stays within it, exactly when
// the test on the whole estimate admits it.
func (t *Table) plan(e *hdr, now int64, force *health) plan {
	g := t.gen.Load() // before the limits: a budget never outlives a SetLimits
	p := plan{k: t.geo.Index(now), local: !t.eventual}
	p.s = t.slotOf(p.k)
	p.tag = (p.k + int64(g)) & tagMask
	switch {
	case force != nil:
		p.health = *force
	case !p.local:
		p.health = health(t.health.Load())
	}
	if p.rotated = t.rotate(e, p.k, p.s); !p.rotated || p.health == failClosed {
		return p
	}
	for {
		p.sq = e.synced.Load() // before the scan
		v := t.scan(e, p.k, p.s, t.geo.Phase(now))
		p.room = clampCount(v.others.Room(t.limit.Load()))
		p.budget = p.room
		var lease int64
		switch p.health {
		case healthy:
			if !p.local {
				p.budget = min(p.budget, t.capv.Load()-v.div)
				// The lease's units are counted in the window already
				// (in glob) and are this instance's to admit.
				lease = t.leaseAt(e, p.k)
			}
		case failLocal:
			p.fair = t.fairShare(v)
			p.shareBudget = clampCount(v.own.Room(p.fair))
			p.budget = min(p.budget, p.shareBudget)
		case recovering:
			// Everything this instance sees, its own counts too, within
			// its share: the rest of the window is kept for the others'
			// outage counts that have not reached the store yet.
			p.budget = min(p.budget, clampCount(v.others.Room(t.share.Load())))
		case failOpen:
			p.budget = maxCount / 2
		}
		p.budget = clampCount(max0(p.budget) + lease)
		p.room = clampCount(p.room + lease)
		if force != nil {
			return p
		}
		e.room.Store(pack(p.tag, p.room))
		e.budget.Store(pack(p.tag, p.budget))
		// A Settle that stored new totals after our scan may have stored
		// its budget before ours: ours, from the superseded totals, must not
		// outlive it, so compute again.
		if e.synced.Load() == p.sq {
			return p
		}
	}
}

// fairShare is this instance's part, while the store is down under
// FailLocal, of what the window had left when it went down: share/L of the
// room the acknowledged counts leave, ⌊(L − G)·⌊L/N̂⌋/L⌋ ≤ (L − G)/N̂, where G
// is the fleet's count as the last pull saw it (glob, without this
// instance's own unacknowledged counts, which the share's check counts
// itself). N̂ instances that each keep their own count within it admit at
// most L − G between them on top of what the store had seen, so a window
// spanning the start of an outage stays within L plus what the views had not
// seen (at most the divergence caps): not L plus N̂ whole shares. As the
// outage goes on the acknowledged buckets leave the window and the part
// grows back to the whole share ⌊L/N̂⌋.
func (t *Table) fairShare(v view) int64 {
	ack := window.Estimate{Whole: v.others.Whole - v.own.Whole, Weighted: v.others.Weighted - v.own.Weighted}
	room := ack.Room(t.limit.Load())
	share := t.share.Load()
	switch {
	case room <= 0 || share <= 0:
		return 0
	case room >= t.limit.Load():
		return share
	}
	hi, lo := bits.Mul64(uint64(room), uint64(share))
	q, _ := bits.Div64(hi, lo, uint64(t.limit.Load())) // room < limit: the quotient fits
	return int64(q)
}

// clampCount keeps a room within what a word holds.
func clampCount(x int64) int64 {
	return min(max(x, -maxCount), maxCount)
}

// slow recomputes e's budget at now and decides n exactly. ok is false if the
// entry turned out to be gone and the check must start over.
func (t *Table) slow(e *hdr, now int64, n int64, force *health) (v verdict.Verdict, ok bool) {
	p := t.plan(e, now, force)
	if !p.rotated {
		v.Status = verdict.OverLimit
		return v, true
	}
	if p.health == failClosed {
		v.Status = verdict.StoreDown
		return v, true
	}
	for {
		w := t.pend(e, p.s).Load()
		if e.synced.Load() != p.sq {
			// The syncer may have lowered pend since the budget was
			// computed (Settle, Release): it holds for the counts it was
			// computed with, not for what a lowering freed.
			return t.slow(e, now, n, force)
		}
		if tagOf(w) != p.k&tagMask {
			if !t.rotate(e, p.k, p.s) {
				v.Status = verdict.OverLimit
				return v, true
			}
			continue
		}
		c := countOf(w) + n
		if c > p.budget {
			v.Remaining = max0(p.room - countOf(w))
			break
		}
		if t.pend(e, p.s).CompareAndSwap(w, w+uint64(n)) {
			if st := e.state.Load(); st != t.ok && !t.settleState(e, st) {
				t.pend(e, p.s).Add(-uint64(n))
				return v, false
			}
			if force == nil {
				t.afterAdmit(e, c, p.budget, p.room, n)
			}
			v.Status, v.Remaining = verdict.Allowed, max0(p.room-c)
			return v, true
		}
	}
	if force == nil {
		// Not admitted here: the store decides, or a denial. Either costs
		// more than a clock read; the time must be fresh for the checks that
		// follow, which a busy key past its cap or a full one make with
		// counts too small for the every-16th-unit catch-up (clock.go).
		t.catchUp()
	}
	cur := countOf(t.pend(e, p.s).Load()) + n
	if p.health == healthy && !p.local && cur <= p.room {
		v.Status = verdict.OverCap
		return v, true
	}
	v.Status = verdict.OverLimit
	v.Reset = t.resetOf(e, now)
	if cur > p.room {
		v.RetryAfter = t.geo.RetryAfter(now, t.limit.Load(), n, func(j int64) int64 {
			si := t.slotOf(j)
			return countAt(t.pend(e, si).Load(), j) + countAt(t.glob(e, si).Load(), j)
		})
	}
	if p.health == recovering && cur <= p.room {
		// Held back for the others' outage counts: retry once the window
		// as this instance sees it has room under the share.
		share := t.share.Load()
		if v.RetryAfter = t.geo.ResetAfter(now); n <= share {
			v.RetryAfter = t.geo.RetryAfter(now, share, n, func(j int64) int64 {
				si := t.slotOf(j)
				return countAt(t.pend(e, si).Load(), j) + countAt(t.glob(e, si).Load(), j)
			})
		}
	}
	if p.health == failLocal && cur > p.shareBudget {
		share := p.fair
		ra := t.geo.ResetAfter(now)
		if n <= share {
			ra = t.geo.RetryAfter(now, share, n, func(j int64) int64 {
				return countAt(t.pend(e, t.slotOf(j)).Load(), j)
			})
		}
		if v.RetryAfter >= 0 {
			v.RetryAfter = max(v.RetryAfter, ra)
		}
	}
	if n == 1 && force == nil {
		t.cacheDenial(e, p.tag, now, v.RetryAfter)
	}
	return v, true
}
