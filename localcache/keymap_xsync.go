//go:build sluice_xsyncmap

package localcache

import "github.com/puzpuzpuz/xsync/v3"

// keyMap maps keys to their entries, over an xsync.MapOf: the alternative
// to the hand-written map of keymap.go, built with the tag sluice_xsyncmap
// so that benchmarks/keymap.sh can measure the two side by side
// (docs/performance.md, "The key map"). The methods and their semantics are
// keymap.go's. The map's key is always the entry's own copy (keyOf), never
// the caller's string, which may live in a reused buffer.
type keyMap struct {
	m *xsync.MapOf[string, *hdr]
}

func newKeyMap() *keyMap {
	return &keyMap{m: xsync.NewMapOf[string, *hdr]()}
}

// Load returns key's entry, or nil.
func (m *keyMap) Load(key string) *hdr {
	e, _ := m.m.Load(key)
	return e
}

// LoadOrInsert returns key's entry if there is one; else it inserts the
// entry mk returns (whose key must be key) and returns it, with inserted
// true. mk runs before any of the map's locks is taken; if another
// goroutine inserts key meanwhile, mk's entry is dropped and key's is
// returned.
func (m *keyMap) LoadOrInsert(key string, mk func() *hdr) (e *hdr, inserted bool) {
	if e, ok := m.m.Load(key); ok {
		return e, false
	}
	e = mk()
	cur, loaded := m.m.LoadOrStore(keyOf(e), e)
	return cur, !loaded
}

// Replace makes e (whose key must be key) key's entry, if key's entry is old
// or key has none; it reports whether it did.
func (m *keyMap) Replace(key string, old, e *hdr) bool {
	if cur, ok := m.m.Load(key); ok && cur != old {
		return false
	}
	done := false
	// Compute stores the key it is given with what the callback returns,
	// even unchanged: e's own copy, which keeps e's memory while the record
	// lasts if the callback keeps cur (another Replace won since the Load;
	// the Load above makes that rare).
	m.m.Compute(keyOf(e), func(cur *hdr, loaded bool) (*hdr, bool) {
		if loaded && cur != old {
			return cur, false
		}
		done = true
		return e, false
	})
	return done
}

// Delete removes key's entry if it is e.
func (m *keyMap) Delete(key string, e *hdr) {
	if cur, ok := m.m.Load(key); !ok || cur != e {
		return
	}
	// As in Replace, the key given to Compute is stored if the callback
	// keeps cur: e's own copy (the only caller, the sweep, passes keyOf(e)).
	m.m.Compute(keyOf(e), func(cur *hdr, loaded bool) (*hdr, bool) {
		// Not loaded: delete stores nothing.
		return cur, !loaded || cur == e
	})
}

// Range calls f with every entry until f returns false. An entry inserted
// or deleted meanwhile may be seen or not.
func (m *keyMap) Range(f func(e *hdr) bool) {
	m.m.Range(func(_ string, e *hdr) bool { return f(e) })
}

// Len returns the number of entries.
func (m *keyMap) Len() int { return m.m.Size() }
