package localcache

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// LeaseTable is the per-key state of an Eventual TokenBucket or GCRA rule on
// one instance (window.SplitBucket): the units the store leased this
// instance, which it admits on its own, and the key's TAT in the store as of
// the store's last answer.
//
// A check with enough units held takes them with one compare-and-swap: one
// map load, no lock, no allocation, no clock read, no round trip (Allow);
// the check that leaves less than half the lease says so (TakenLow), so
// that the engine asks for more in the background before the units run
// out, and a key below its limit never waits for the store.
// Otherwise it is decided locally only if the store would deny it for sure
// (Denied): the store's TAT only grows (units are taken from its bucket,
// never given back), so a cost the last TAT seen already denies is denied
// until that TAT's RetryAfter, exactly. Anything else asks the store, and
// at most one check per key at a time asks for a lease with it (Ask), so
// that an entry never holds more than the most set by SetLease. Denied,
// SetLease, Ask, Settle, Owe and TAT are the table's store side, which the
// engine calls through Leases (leasestore.go).
type LeaseTable struct {
	g    window.GCRA // the store's bucket: capacity SplitBucket's store
	keys keyed[leaseEntry]
	most atomic.Int64 // the most units an entry may hold
	// seen is the latest store time an answer carried (Settle): the store's
	// clock reads at least that now, whatever the caller's estimate of it.
	seen atomic.Int64
}

type leaseEntry struct {
	held   atomic.Int64 // units leased, not yet admitted; heldGone once evicted
	tat    atomic.Int64 // the store's TAT at its last answer; tatFresh before
	owed   atomic.Int64 // units the failure mode admitted, not charged to the store yet
	asking atomic.Bool  // a check is asking the store for a lease
}

// heldGone marks an entry Sweep evicted.
const heldGone = math.MinInt64

func newLeaseEntry() *leaseEntry {
	e := &leaseEntry{}
	e.tat.Store(tatFresh)
	return e
}

// NewLeaseTable returns the table of a rule whose store decides on g (the
// store's bucket), under the key bound keys. It holds no lease until
// SetLease (Leases).
func NewLeaseTable(g window.GCRA, keys *Keys) (*LeaseTable, error) {
	if keys == nil {
		return nil, fmt.Errorf("%w: Keys is nil", errConfig)
	}
	if g.Interval() < 1 {
		return nil, fmt.Errorf("%w: zero GCRA", errConfig)
	}
	return &LeaseTable{g: g, keys: newKeyed(keys, newLeaseEntry)}, nil
}

// Allow admits cost n for key on the units held, if there are enough; now
// only dates the Outcome's fields (the decision does not depend on it: a
// published time a tick old will do). The Step says whether it did, and
// whether the lease runs low; for Ask the Outcome is empty: the caller asks
// Denied, then the store (Ask, then Settle with its answer).
func (t *LeaseTable) Allow(key string, now, n int64) (verdict.Outcome, verdict.Step) {
	e := t.keys.lookup(key)
	if e == nil {
		// Kept out by the key bound's admission rule: no state of its own,
		// the store decides it alone (Ask finds no entry: no lease).
		return verdict.Outcome{}, verdict.Ask
	}
	// tat is read first: the compare-and-swap takes the cache line they
	// share, and a check on another core takes it back.
	tat, h := e.tat.Load(), e.held.Load()
	for h >= n {
		if e.held.CompareAndSwap(h, h-n) {
			o := verdict.Outcome{Allowed: true, Remaining: h - n + t.g.Remaining(tat, now), ResetAfter: t.g.ResetAfter(tat, now)}
			if 2*(h-n) < t.most.Load() && !e.asking.Load() {
				return o, verdict.TakenLow
			}
			return o, verdict.Taken
		}
		h = e.held.Load()
	}
	if h == heldGone {
		t.keys.replace(e, key)
	}
	return verdict.Outcome{}, verdict.Ask
}

// give adds leased units to those e holds, up to the most set by SetLease
// (any more are dropped), and returns the units it holds.
func (t *LeaseTable) give(e *leaseEntry, leased int64) int64 {
	held := e.held.Load()
	for leased > 0 && held != heldGone {
		n := max(min(held+leased, t.most.Load()), held)
		if e.held.CompareAndSwap(held, n) {
			held = n
			break
		}
		held = e.held.Load()
	}
	return max(held, 0)
}

// Refund gives back n units that Allow or the store admitted for key and
// the caller did not use: the entry holds them again (up to the most set by
// SetLease; any more are dropped).
func (t *LeaseTable) Refund(key string, n int64) {
	if e := t.entry(key); e != nil {
		t.give(e, n)
	}
}

// storeTAT returns e's TAT in the store at its last answer, 0 if none.
func (e *leaseEntry) storeTAT() int64 {
	if tat := e.tat.Load(); tat > tatFresh {
		return tat
	}
	return 0
}

// entry returns key's entry, nil if it has none.
func (t *LeaseTable) entry(key string) *leaseEntry {
	e, _ := t.keys.m.Load(key)
	return e
}

// Peek returns what a check of one unit would see at now: the units held
// and what the store's bucket had left at its last answer, refilled since.
func (t *LeaseTable) Peek(key string, now int64) verdict.Outcome {
	tat, held := int64(tatFresh), int64(0)
	if e := t.entry(key); e != nil {
		tat, held = e.tat.Load(), max(e.held.Load(), 0)
	}
	rem := held + t.g.Remaining(tat, now)
	return verdict.Outcome{Allowed: rem >= 1, Remaining: rem, ResetAfter: t.g.ResetAfter(tat, now)}
}

// Sweep evicts the keys whose last TAT seen has passed at now and that no
// check is asking about. Units they held are dropped: they were taken from
// the store's bucket at least a whole refill ago.
func (t *LeaseTable) Sweep(now int64) (removed int) {
	t.keys.m.Range(func(key string, e *leaseEntry) bool {
		if e.tat.Load() > now || e.asking.Load() {
			return true
		}
		if h := e.held.Load(); h != heldGone && e.held.CompareAndSwap(h, heldGone) {
			t.keys.remove(key, e)
			removed++
		}
		return true
	})
	return removed
}
