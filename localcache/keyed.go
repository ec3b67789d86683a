package localcache

import (
	"hash/maphash"
	"strings"

	"github.com/puzpuzpuz/xsync/v3"
	"github.com/sluicehq/sluice/internal/tableport"
)

var (
	_ tableport.KeyTable = (*GCRATable)(nil)
	_ tableport.KeyTable = (*WarmTable)(nil)
	_ tableport.KeyTable = (*LogTable)(nil)
)

// keyed is the key index of a KeyTable: an xsync.MapOf of per-key entries
// under the limiter's shared key bound, which new keys enter by the same
// admission rule as a Table's (admission.go): below half of the bound at
// their first check, past it once the shared frequency sketch has seen them
// often enough, at the bound not at all. A key without an entry has no
// shared state to fall back on: lookup returns nil, and the table decides
// the key on its own sketch of untracked keys (keyuntracked.go).
//
// A new entry starts unseeded (each table has a sentinel state for it): the
// first check that finds it, under the entry's own synchronization, takes
// over what the table's sketch holds for the key (the sketch's estimate, at
// least the key's own state), so that a key entering the table keeps its
// debt or its window instead of restarting. Seeding after the entry is in
// the map, not before, is what keeps a check racing with the entry's
// arrival from being lost: a check decided on the sketch looks for the
// entry after its admission is in the sketch, and records the admission in
// it if the entry is seeded already; if the entry was not in the map yet,
// its seed is read later and holds the admission (keyuntracked.go says why).
//
// An entry type E marks itself gone when Sweep evicts it; a check that
// finds its entry gone installs a new one (replace, seeded as any new entry
// is) and starts over, so that no admission is recorded on an entry no
// longer in the map.
type keyed[E any] struct {
	m     *xsync.MapOf[string, *E]
	keys  *Keys
	seed  maphash.Seed // hashes keys for the admission rule
	fresh func() *E
}

func newKeyed[E any](keys *Keys, fresh func() *E) keyed[E] {
	return keyed[E]{m: xsync.NewMapOf[string, *E](), keys: keys, seed: maphash.MakeSeed(), fresh: fresh}
}

// lookup returns key's entry, creating it if the admission rule lets key
// in (the check counts as a sighting of key); nil if key stays untracked.
func (k *keyed[E]) lookup(key string) *E {
	if e, ok := k.m.Load(key); ok {
		return e
	}
	return k.insert(key)
}

// insert is lookup for a key not in the map.
func (k *keyed[E]) insert(key string) *E {
	if !k.keys.admits(k.seed, key, true) {
		k.keys.out.Add(1)
		return nil
	}
	c := strings.Clone(key) // the caller's string may live in a reused buffer
	e, loaded := k.m.LoadOrCompute(c, k.fresh)
	if !loaded {
		k.keys.n.Add(1)
	}
	return e
}

// replace returns the entry to use for key in place of e, which Sweep
// evicted: a fresh one, unless another check installed one already.
func (k *keyed[E]) replace(e *E, key string) *E {
	cur, _ := k.m.Compute(strings.Clone(key), func(old *E, loaded bool) (*E, bool) {
		if loaded && old != e {
			return old, false
		}
		k.keys.n.Add(1)
		return k.fresh(), false
	})
	return cur
}

// remove deletes key from the map if its entry is still e, which the caller
// has marked gone, and releases its place in the bound.
func (k *keyed[E]) remove(key string, e *E) {
	k.keys.n.Add(-1)
	k.m.Compute(key, func(old *E, loaded bool) (*E, bool) {
		return old, !loaded || old == e
	})
}

// Len returns the number of keys tracked.
func (k *keyed[E]) Len() int { return k.m.Size() }
