package localcache

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// GCRATable is the per-key state of a TokenBucket or GCRA rule without a
// WarmUp: one theoretical arrival time (TAT) per key, the whole state of
// window.GCRA, in one atomic int64.
//
// TokenBucket keys live here too: the classic bucket's two numbers (level,
// time) are one timestamp, TAT = time + (Burst − level)·T, and window's
// tests prove the two admit the same costs. One word means a check is one
// map load, one load and one compare-and-swap: no lock, no allocation, no
// multi-word consistency to keep.
//
// A new entry holds tatSeed until its first check seeds it with what the
// table's sketch of untracked keys bounds the key's TAT by, or tatFresh (a
// full bucket for any time) if there is no sketch (keyuntracked.go). Sweep
// evicts a key whose TAT has passed (its bucket is full again, as a fresh
// key's) by swapping tatGone in: the swap and a check's swap exclude each
// other, so a check either lands before the eviction (and the key is not
// idle any more) or finds the entry gone and starts over on a fresh one.
//
// A key the admission rule keeps out of the table is decided on a
// count-min sketch of TATs (tatsketch.go), never on shared state.
type GCRATable struct {
	g         window.GCRA
	keys      keyed[gcraEntry]
	strangers atomic.Pointer[tatSketch] // untracked keys' TATs, allocated on first use
}

type gcraEntry struct{ tat atomic.Int64 }

// The sentinel TATs, below every real one: a check tells both sentinels
// from a TAT with one compare (tat < tatFresh).
const (
	tatGone  = math.MinInt64     // evicted by Sweep
	tatSeed  = math.MinInt64 + 1 // new, not seeded yet
	tatFresh = math.MinInt64 + 2 // never admitted to: a full bucket
)

func newGCRAEntry() *gcraEntry {
	e := &gcraEntry{}
	e.tat.Store(tatSeed)
	return e
}

// NewGCRATable returns the table of a rule with the math g, under the key
// bound keys.
func NewGCRATable(g window.GCRA, keys *Keys) (*GCRATable, error) {
	if keys == nil {
		return nil, fmt.Errorf("%w: Keys is nil", errConfig)
	}
	if g.Interval() < 1 {
		return nil, fmt.Errorf("%w: zero GCRA", errConfig)
	}
	return &GCRATable{g: g, keys: newKeyed(keys, newGCRAEntry)}, nil
}

// Allow decides cost n for key at now and records it if admitted.
func (t *GCRATable) Allow(key string, now, n int64) verdict.Outcome {
	return t.AllowAbove(key, now, n, tatFresh)
}

// AllowAbove is Allow on a TAT of at least floor: a bound on the key's state
// from elsewhere (an Eventual bucket's failure mode starts from the store's
// bucket as this instance last saw it, not from a full one). An untracked
// key is decided on its sketch, without the floor.
func (t *GCRATable) AllowAbove(key string, now, n, floor int64) verdict.Outcome {
	e := t.keys.lookup(key)
	if e == nil {
		return t.untracked(key, now, n)
	}
	for {
		was := e.tat.Load()
		if was < tatFresh {
			e = t.settle(e, key, was)
			continue
		}
		tat := max(was, floor)
		next, ok := t.g.Admit(tat, now, n)
		if !ok {
			// As denied, written out: denied does not inline.
			return verdict.Outcome{
				Remaining:  t.g.Remaining(tat, now),
				ResetAfter: t.g.ResetAfter(tat, now),
				RetryAfter: t.g.RetryAfter(tat, now, n),
			}
		}
		if e.tat.CompareAndSwap(was, next) {
			return t.admitted(next, now)
		}
	}
}

// settle returns the entry to decide key on in place of e, whose state tat
// is a sentinel: e seeded, or a fresh entry if e is gone.
func (t *GCRATable) settle(e *gcraEntry, key string, tat int64) *gcraEntry {
	if tat == tatGone {
		return t.keys.replace(e, key)
	}
	t.seed(e, key)
	return e
}

// denied is the Outcome of a check of n at now denied on state tat.
func (t *GCRATable) denied(tat, now, n int64) verdict.Outcome {
	return verdict.Outcome{
		Remaining:  t.g.Remaining(tat, now),
		ResetAfter: t.g.ResetAfter(tat, now),
		RetryAfter: t.g.RetryAfter(tat, now, n),
	}
}

// admitted is the Outcome of an admission at now that left the TAT at next.
func (t *GCRATable) admitted(next, now int64) verdict.Outcome {
	// next − now ≤ τ: the debt after the admission.
	d := next - now
	return verdict.Outcome{Allowed: true, Remaining: (t.g.Tolerance() - d) / t.g.Interval(), ResetAfter: time.Duration(d)}
}

// Peek returns what a check of one unit would see at now.
func (t *GCRATable) Peek(key string, now int64) verdict.Outcome {
	return t.PeekAbove(key, now, tatFresh)
}

// PeekAbove is Peek on a TAT of at least floor (AllowAbove).
func (t *GCRATable) PeekAbove(key string, now, floor int64) verdict.Outcome {
	tat := int64(tatSeed)
	if e, ok := t.keys.m.Load(key); ok {
		tat = e.tat.Load()
	}
	if tat < tatFresh { // untracked, not seeded yet, or gone: as the sketch bounds it
		tat = t.estimate(key)
	}
	tat = max(tat, floor)
	rem := t.g.Remaining(tat, now)
	return verdict.Outcome{Allowed: rem >= 1, Remaining: rem, ResetAfter: t.g.ResetAfter(tat, now)}
}

// Sweep evicts the keys whose bucket is full at now.
func (t *GCRATable) Sweep(now int64) (removed int) {
	t.keys.m.Range(func(key string, e *gcraEntry) bool {
		if tat := e.tat.Load(); tat >= tatFresh && tat <= now && e.tat.CompareAndSwap(tat, tatGone) {
			t.keys.remove(key, e)
			removed++
		}
		return true
	})
	return removed
}
