package localcache

import (
	"strings"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
)

// Outcome is a KeyTable's answer to a check: the whole decision, since the
// algorithms behind KeyTable decide on one key's state alone. It has four
// words, so that it travels in registers.
type Outcome struct {
	// Allowed reports whether the cost was admitted and recorded.
	Allowed bool
	// Remaining is the largest cost the key would admit now, after this
	// check.
	Remaining int64
	// ResetAfter is how long until the key is back to its full capacity if
	// nothing more is admitted.
	ResetAfter time.Duration
	// RetryAfter is 0 when allowed; otherwise how long until the same cost
	// is admitted if nothing else is, and -1 if it never is.
	RetryAfter time.Duration
}

// KeyTable is the per-key state of one rule whose algorithm decides each
// key on its own state, in this process: GCRATable (TokenBucket and GCRA),
// WarmTable (either with a WarmUp) and LogTable (SlidingLog). It is the seam
// between an engine and that state. Times are nanoseconds on the store
// clock; methods are safe for concurrent use.
type KeyTable interface {
	// Allow decides cost n for key at now and records it if admitted.
	Allow(key string, now, n int64) Outcome
	// Peek returns what a check of one unit would see at now, recording
	// nothing.
	Peek(key string, now int64) Outcome
	// Sweep evicts the keys whose state at now is that of a key never
	// seen, and returns how many.
	Sweep(now int64) int
	// Len returns the number of keys tracked.
	Len() int
}

var (
	_ KeyTable = (*GCRATable)(nil)
	_ KeyTable = (*WarmTable)(nil)
	_ KeyTable = (*LogTable)(nil)
)

// keyed is the key index of a KeyTable: an xsync.MapOf of per-key entries
// under the limiter's shared key bound, with one overflow entry shared by
// every key refused by the bound (as Table does). An entry type E marks
// itself gone when Sweep evicts it; a check that finds its entry gone
// installs a fresh one (replace) and starts over, so that no admission is
// recorded on an entry no longer in the map.
type keyed[E any] struct {
	m        *xsync.MapOf[string, *E]
	keys     *Keys
	overflow *E
	fresh    func() *E
}

func newKeyed[E any](keys *Keys, fresh func() *E) keyed[E] {
	return keyed[E]{m: xsync.NewMapOf[string, *E](), keys: keys, overflow: fresh(), fresh: fresh}
}

// lookup returns key's entry, creating it, or the overflow entry if the
// bound is reached.
func (k *keyed[E]) lookup(key string) *E {
	if e, ok := k.m.Load(key); ok {
		return e
	}
	if k.keys.n.Load() >= k.keys.max {
		k.keys.full.Store(true)
		k.keys.out.Add(1)
		return k.overflow
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
