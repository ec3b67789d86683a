// Package localcache keeps each rule's per-key state in a lock-free map.
//
// This package is sluice's machinery, not its API: it exports what sluice's
// other packages (and their tests) use of it, with no compatibility promise.
// Programs import package sluice (and policy, httplimit).
//
// For every key a Table holds what this instance admitted per sub-window, the
// merged totals pulled from the store, and a cached budget that lets a check
// pass with one compare-and-swap.
//
// # Model
//
// A Table holds the keys of one rule. Each key's entry has a ring of slots, one
// per sub-window (bucket) still inside the window. A slot holds two words, each
// an atomic uint64 tagged with the low 24 bits of its bucket index:
//
//   - pend: what this instance admitted in the bucket and the store has not
//     acknowledged yet (in a Local table: everything it admitted);
//   - glob: the bucket's fleet-wide total, as last pulled from the store.
//
// The estimate for the window is the sliding-window formula of package window
// over glob+pend. A Local table's entries have no glob words. A word whose tag
// is not the bucket asked for counts as zero, so buckets leave the window
// without anyone clearing them.
//
// # Hot path
//
// Besides the ring, an entry caches a budget: the most the current bucket's
// pend may reach while both the limit (window.Room of the estimate) and, for
// an Eventual table, the divergence cap (own unacknowledged count in the
// window ≤ Cap) hold. Everything but the current bucket's pend changes only at
// bucket boundaries, at syncs and when limits change, so the budget stays
// valid until then; it is tagged with the bucket index plus a generation that
// SetLimits bumps. A check that finds a valid budget loads the current pend
// word, adds its cost with one compare-and-swap if the sum stays within the
// budget, and reads the entry's state to see whether the syncer must hear of
// it: no lock, no allocation, no clock read (Tick publishes the time). A
// denial of cost 1 is cached the same way until its retry time. Anything else
// (a new bucket, a new key, a first denial, a stale budget) takes the slow
// path, which recomputes the budget from the ring.
//
// # Bounds
//
// The number of keys across the Tables that share a Keys is bounded (Max),
// and new keys earn their place (admission.go): below half of Max every key
// gets an entry at its first check; past that high-water mark a key gets one
// only once a frequency sketch shared by the Tables (sketch.go, count-min, 4
// rows of 4-bit counters halved every Width/2 sightings, Width = Max rounded
// up to a power of two within [1024, 2^22]: 2·Width bytes, 2 KiB to 8 MiB)
// has seen it 2, 4, 8 or 15 times as the cache fills by eighths; at Max, no
// key does. A flood of keys used once fills the first half and then
// practically stops (5/8 at most), so keys in real use keep their entries
// and new ones get in.
//
// A key without an entry is still limited on its own, never on a shared
// bucket (untracked.go): an Eventual table answers Untracked while the store
// is up, and the store decides the key exactly on its fleet-wide count; a
// Local table, and an Eventual one while the store is down under FailLocal,
// decide it on a per-table windowed count-min sketch (winsketch.go: 4 rows
// of Width' cells of one ring each, Width' = Max/64 rounded up to a power of
// two within [64, 4096]: 22 KiB for Max = 1000 and 1.4 MiB for the default at
// the default precision, allocated at the table's first such decision),
// which over-counts, so it can deny a key that collides with heavy keys in
// every row but never admits one past its limit (the full Limit, or the
// share L/N̂). Memory is bounded whatever the traffic: tracked keys ≤ Max
// plus one per concurrent caller (the bound is checked before an insert),
// and the sketches are fixed-size.
//
// Sweep evicts a key once nothing of it is left in the window, in two passes
// (mark, then remove) so that a check racing with the eviction is never
// lost; a refusal at Max asks for an early sweep (Keys.Usage: Full).
//
// # Other algorithms
//
// The algorithms that decide a key on its own state, without sub-windows,
// have their own tables behind the engines' KeyTable interface
// (tableport.KeyTable; keyed.go: the key index every one of them shares,
// under the same key bound and admission rule as a Table): GCRATable (gcra.go:
// TokenBucket and GCRA, one atomic TAT per key), WarmTable (warmup.go: either
// with a WarmUp, Guava's two numbers packed into one atomic word) and
// LogTable (slidinglog.go: SlidingLog, a ring of timestamps per key under a
// per-key lock, for the reason given there). Each file's doc says how its
// state is represented and why. A key such a table does not track is
// decided on the table's own sketch, never on shared state
// (keyuntracked.go): a count-min sketch of TATs (tatsketch.go: 4 rows of
// Max rounded up to a power of two within [1024, 2^15] cells: 32 KiB to 1
// MiB) for GCRATable and WarmTable, a windowed one (winsketch.go) for
// LogTable; neither admits a key beyond what its own exact state admits,
// and a key entering the table carries its sketch state.
//
// # Files
//
// table.go holds the Table and its memory layout (control.go its control side,
// Table.Control), entry.go an entry's header and states, keys.go the key bound
// and lookups, admission.go the admission rule and sketch.go its frequency
// sketch, untracked.go the decisions on keys without an entry and winsketch.go
// their windowed sketch, check.go the fast path, plan.go the slow path,
// deny.go the denial cache, sync.go what the syncer calls, lease.go the
// store's leases, sweep.go eviction; keyed.go, gcra.go, warmup.go and
// slidinglog.go the other algorithms' tables, keyuntracked.go their decisions
// on keys without an entry and tatsketch.go the sketch of TATs; leases.go an
// Eventual bucket's lease table and leasestore.go its store side
// (LeaseTable.Leases). What the tables answer a check with (Verdict and its
// Status, Outcome, the lease table's Step and Ticket) is package
// internal/verdict's vocabulary, which the engines read too.
package localcache

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// health is the store's state as a table decides by it: healthy, or down
// with a failure mode (policy.FailureMode + 1).
type health uint32

const (
	healthy health = iota
	failLocal
	failOpen
	failClosed
	recovering // up again after an outage under FailLocal (Limits.Recovering)
)

func healthOf(down bool, m policy.FailureMode) health {
	if !down {
		return healthy
	}
	return health(m) + 1
}

// healthOfLimits is the health l sets.
func healthOfLimits(l tableport.Limits) health {
	if l.Recovering && !l.Down {
		return recovering
	}
	return healthOf(l.Down, l.Mode)
}

// Config configures a Table.
type Config struct {
	// Geometry is the rule's window geometry.
	Geometry window.Sliding
	// Limit is the rule's limit per window: 1 to 2^34 (policy.MaxLimit is
	// below).
	Limit int64
	// Eventual makes the table track dirty keys for the syncer and enforce the
	// divergence cap; otherwise it is Local: nothing leaves this process.
	Eventual bool
	// ByNeed (Eventual tables) says that the syncer syncs the table's keys
	// by need (Need, Park): a new key then starts parked, and its first
	// admissions do not queue it (added, need.go). A table whose syncer
	// takes every key it drains (a Strict rule's) leaves it false, so that
	// a new key's counts are queued for the next cycle.
	ByNeed bool
	// Keys is the key bound shared with other tables; required.
	Keys *Keys
	// Now, if not nil, reads the clock the table's times are on (the store
	// clock): checks on the published time (Allow) use it to catch up with a
	// ticker that falls behind (clock.go).
	Now func() int64
}

// errConfig is wrapped by New's errors.
var errConfig = errors.New("localcache: bad config")

// New returns a Table for cfg.
func New(cfg Config) (*Table, error) {
	if cfg.Keys == nil {
		return nil, fmt.Errorf("%w: Keys is nil", errConfig)
	}
	if cfg.Limit < 1 || cfg.Limit > maxCount/4 {
		return nil, fmt.Errorf("%w: limit %d out of range", errConfig, cfg.Limit)
	}
	if cfg.Geometry.Buckets() < 1 {
		return nil, fmt.Errorf("%w: zero geometry", errConfig)
	}
	return newTable(cfg, max(cfg.Geometry.Span(), 2))
}
