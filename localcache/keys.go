package localcache

import (
	"strings"
	"sync/atomic"
)

// Keys bounds the number of keys tracked by the Tables that share it.
type Keys struct {
	n    atomic.Int64
	max  int64
	full atomic.Bool
}

// NewKeys returns a bound of max keys.
func NewKeys(max int64) *Keys { return &Keys{max: max} }

// Len returns the number of tracked keys.
func (k *Keys) Len() int64 { return k.n.Load() }

// Max returns the bound.
func (k *Keys) Max() int64 { return k.max }

// Full reports, and clears, whether a new key has been refused since the last
// call: a hint to sweep now.
func (k *Keys) Full() bool { return k.full.Swap(false) }

// lookup returns key's entry, creating it, or the overflow entry if the
// bound is reached.
func (t *Table) lookup(key string) *hdr {
	if e, ok := t.m.Load(key); ok {
		return e
	}
	if t.keys.n.Load() >= t.keys.max {
		t.keys.full.Store(true)
		return t.overflow
	}
	k := strings.Clone(key) // the caller's string may live in a reused buffer
	e, loaded := t.m.LoadOrCompute(k, func() *hdr { return t.newEntry(k) })
	if !loaded {
		t.keys.n.Add(1)
	}
	return e
}

// replace installs a fresh entry for key, whose entry e is gone, unless
// another check already did.
func (t *Table) replace(e *hdr, key string) {
	t.m.Compute(key, func(old *hdr, loaded bool) (*hdr, bool) {
		if loaded && old != e {
			return old, false
		}
		t.keys.n.Add(1)
		return t.newEntry(strings.Clone(key)), false
	})
}

// Ref returns key's entry, creating it; ok is false if the cache is full and
// key is on the shared overflow entry.
func (t *Table) Ref(key string) (Ref, bool) {
	e := t.lookup(key)
	return e, e != t.overflow
}

// Len returns the number of keys tracked by this table.
func (t *Table) Len() int { return t.m.Size() }
