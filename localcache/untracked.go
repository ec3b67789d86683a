package localcache

import "github.com/sluicehq/sluice/internal/verdict"

// How a table decides a key it does not track (one the admission rule has
// not let in, admission.go). There is no shared bucket: every such key is
// limited on its own, in the store or in the table's windowed sketch
// (winsketch.go).
//
//   - A Local table decides it on its sketch against the full Limit.
//   - An Eventual table, store healthy: the status Untracked hands the check
//     to the store, which decides it exactly on the key's fleet-wide count
//     (the engine reserves it with no local state: syncport.WindowStore.Reserve with
//     a nil Ref).
//   - An Eventual table, store down (or the store failed the check: see
//     AllowDegraded): by the failure mode. FailLocal decides on the sketch
//     against the share L/N̂, as it bounds a tracked key's own count;
//     FailOpen admits, counting nothing; FailClosed says StoreDown.
//
// What the sketch admits stays in this process. When a key enters the cache
// its entry starts with what the sketch counted for it (an upper bound), so
// moving from the sketch into the cache never restarts its window — in a
// Local table, and in an Eventual one while the store is down, whose entry
// then pushes those counts with its others when the store is back. While
// the store is up an Eventual table's new entry starts empty: an
// over-estimate pushed to the store would deny the key fleet-wide.

// winSketch returns t's sketch of untracked keys, allocating it on first
// use.
func (t *Table) winSketch() *winSketch {
	if s := t.strangers.Load(); s != nil {
		return s
	}
	t.strangers.CompareAndSwap(nil, newWinSketch(t.geo, winWidth(t.keys.max), t.ring))
	return t.strangers.Load()
}

// untracked decides cost n at now for key, which t does not track, with the
// store's health h (ignored by a Local table).
func (t *Table) untracked(key string, now, n int64, h health) verdict.Verdict {
	if !t.eventual {
		return t.winSketch().decide(key, now, n, t.limit.Load())
	}
	switch h {
	case healthy:
		return verdict.Verdict{Status: verdict.Untracked}
	case failOpen:
		return verdict.Verdict{Status: verdict.Allowed, Remaining: max0(t.limit.Load() - n)}
	case failClosed:
		return verdict.Verdict{Status: verdict.StoreDown}
	}
	return t.winSketch().decide(key, now, n, min(t.share.Load(), t.limit.Load()))
}

// fresh readies e, a new entry for key, and returns it: seeded from the
// sketch of untracked keys when its counts are this process's own (see
// above).
func (t *Table) fresh(e *hdr, key string, now int64) *hdr {
	if s := t.strangers.Load(); s != nil && (!t.eventual || health(t.health.Load()) != healthy) {
		s.seedEntry(t, e, key, now)
	}
	return e
}

// untrackedRoom returns what room says of a key t does not track: the full
// Limit, or in a Local table what its sketch leaves.
func (t *Table) untrackedRoom(key string, now int64) int64 {
	if s := t.strangers.Load(); s != nil && !t.eventual {
		return s.room(key, now, t.limit.Load())
	}
	return t.limit.Load()
}
