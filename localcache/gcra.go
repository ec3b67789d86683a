package localcache

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

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
// A key never seen holds tatFresh (a full bucket for any time). Sweep evicts
// a key whose TAT has passed (its bucket is full again, as a fresh key's)
// by swapping tatGone in: the swap and a check's swap exclude each other,
// so a check either lands before the eviction (and the key is not idle any
// more) or finds the entry gone and starts over on a fresh one.
type GCRATable struct {
	g    window.GCRA
	keys keyed[gcraEntry]
}

type gcraEntry struct{ tat atomic.Int64 }

const (
	tatGone  = math.MinInt64     // evicted by Sweep
	tatFresh = math.MinInt64 + 1 // never admitted to: a full bucket
)

func newGCRAEntry() *gcraEntry {
	e := &gcraEntry{}
	e.tat.Store(tatFresh)
	return e
}

// NewGCRATable returns the table of a rule with the math g, under the key
// bound keys.
func NewGCRATable(g window.GCRA, keys *Keys) (*GCRATable, error) {
	if keys == nil {
		return nil, fmt.Errorf("%w: Keys is nil", ErrConfig)
	}
	if g.Interval() < 1 {
		return nil, fmt.Errorf("%w: zero GCRA", ErrConfig)
	}
	return &GCRATable{g: g, keys: newKeyed(keys, newGCRAEntry)}, nil
}

// Allow decides cost n for key at now and records it if admitted.
func (t *GCRATable) Allow(key string, now, n int64) Outcome {
	e := t.keys.lookup(key)
	for {
		tat := e.tat.Load()
		if tat == tatGone {
			e = t.keys.replace(e, key)
			continue
		}
		next, ok := t.g.Admit(tat, now, n)
		if !ok {
			return Outcome{
				Remaining:  t.g.Remaining(tat, now),
				ResetAfter: t.g.ResetAfter(tat, now),
				RetryAfter: t.g.RetryAfter(tat, now, n),
			}
		}
		if e.tat.CompareAndSwap(tat, next) {
			// next − now ≤ τ: the debt after the admission.
			d := next - now
			return Outcome{Allowed: true, Remaining: (t.g.Tolerance() - d) / t.g.Interval(), ResetAfter: time.Duration(d)}
		}
	}
}

// Peek returns what a check of one unit would see at now.
func (t *GCRATable) Peek(key string, now int64) Outcome {
	tat := int64(tatFresh)
	if e, ok := t.keys.m.Load(key); ok {
		tat = e.tat.Load()
	}
	rem := t.g.Remaining(tat, now)
	return Outcome{Allowed: rem >= 1, Remaining: rem, ResetAfter: t.g.ResetAfter(tat, now)}
}

// Sweep evicts the keys whose bucket is full at now.
func (t *GCRATable) Sweep(now int64) (removed int) {
	t.keys.m.Range(func(key string, e *gcraEntry) bool {
		if tat := e.tat.Load(); tat != tatGone && tat <= now && e.tat.CompareAndSwap(tat, tatGone) {
			t.keys.remove(key, e)
			removed++
		}
		return true
	})
	return removed
}

// Len returns the number of keys tracked.
func (t *GCRATable) Len() int { return t.keys.Len() }
