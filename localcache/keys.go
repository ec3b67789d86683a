package localcache

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
)

// Keys bounds the number of keys tracked by the tables that share it (Tables
// and KeyTables), and holds the admission rule's frequency sketch
// (admission.go), which they share too.
type Keys struct {
	n    atomic.Int64
	max  int64
	full atomic.Bool
	door atomic.Pointer[freqSketch] // allocated past the high-water mark
	out  atomic.Int64               // checks of keys the admission rule kept out
}

// NewKeys returns a bound of max keys.
func NewKeys(max int64) *Keys { return &Keys{max: max} }

// Usage returns the bound's usage, for the limiter's stats and sweeps.
func (k *Keys) Usage() tableport.KeyUsage { return (*keyUsage)(k) }

// keyUsage is a Keys as the limiter reads it (tableport.KeyUsage).
type keyUsage Keys

// Len returns the number of tracked keys.
func (u *keyUsage) Len() int64 { return (*Keys)(u).tracked() }

// Untracked returns how many checks found their key without an entry and
// not let in by the admission rule, since NewKeys (across the Tables that
// share the bound).
func (u *keyUsage) Untracked() int64 { return u.out.Load() }

// Full reports, and clears, whether a new key has been refused at the bound
// since the last call: a hint to sweep now.
func (u *keyUsage) Full() bool { return u.full.Swap(false) }

// tracked returns the number of tracked keys.
func (k *Keys) tracked() int64 { return k.n.Load() }

// lookup returns key's entry, creating it if the admission rule lets key in
// (with sight, this check counts as a sighting of it); nil if key stays
// untracked. A new entry of a Local table, or of any table while the store
// is down, starts with what the table's sketch of untracked keys counted
// for key (fresh).
func (t *Table) lookup(key string, now int64, sight bool) *hdr {
	if e := t.m.Load(key); e != nil {
		return e
	}
	if !t.keys.admits(t.seed, key, sight) {
		if sight {
			t.keys.out.Add(1)
		}
		return nil
	}
	// The entry holds its own copy of key (the caller's string may live in
	// a reused buffer).
	e, inserted := t.m.LoadOrInsert(key, func() *hdr { return t.fresh(t.newEntry(key), key, now) })
	if inserted {
		t.added(e)
	}
	return e
}

// replace installs a fresh entry for key, whose entry e is gone, unless
// another check already did.
func (t *Table) replace(e *hdr, key string) {
	ne := t.newEntry(key)
	if t.m.Replace(key, e, ne) {
		t.added(ne)
	}
}

// ref returns key's entry, creating it if the admission rule lets key in
// (the call counts as a sighting of key); ok is false, and the Ref nil, if
// key stays untracked: it has no local state to sync.
func (t *Table) ref(key string) (verdict.Ref, bool) {
	if e := t.lookup(key, t.now.Load(), true); e != nil {
		return e, true
	}
	return nil, false
}
