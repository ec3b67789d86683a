// Package localcache keeps each rule's per-key state in a lock-free map: what this instance admitted per sub-window, the merged totals pulled from the store, and a budget that lets a check pass with one compare-and-swap.
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
// over glob+pend. A Local table's entries have no glob words. A word whose tag is not the bucket asked for counts as zero,
// so buckets leave the window without anyone clearing them.
//
// # Hot path
//
// Besides the ring, an entry caches a budget: the most the current bucket's
// pend may reach while both the limit (estimate ≤ Limit) and, for an Eventual
// table, the divergence cap (own unacknowledged count in the window ≤ Cap)
// hold. Everything but the current bucket's pend changes only at bucket
// boundaries, at syncs and when limits change, so the budget stays valid until
// then; it is tagged with the bucket index plus a generation that SetLimits
// bumps. A check that finds a valid budget loads the current pend word, adds
// its cost with one compare-and-swap if the sum stays within the budget, and
// reads the entry's state to see whether the syncer must hear of it: no lock,
// no allocation, no clock read (Tick publishes the time). A denial of cost 1
// is cached the same way until its retry time. Anything else (a new bucket, a
// new key, a first denial, a stale budget) takes the slow path, which
// recomputes the budget from the ring.
//
// # Bounds
//
// The number of keys across the Tables that share a Keys is bounded. When it is
// reached, checks for keys not yet tracked are decided on a per-table overflow
// entry shared by all of them (as if they were one key, local to this process)
// until Sweep evicts idle keys: a key flood can neither grow memory nor escape
// limiting. Sweep evicts a key once nothing of it is left in the window, in two
// passes (mark, then remove) so that a check racing with the eviction is never
// lost.
package localcache

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/window"
)

// Status is the outcome of a check on a Table.
type Status uint8

const (
	// Allowed means the cost was admitted and counted.
	Allowed Status = iota
	// OverLimit means the window (or, while degraded with FailLocal, this
	// instance's share of it) has no room for the cost.
	OverLimit
	// OverCap means the cost fits the window as this instance sees it, but
	// admitting it locally would take the instance's unsynced count past the
	// divergence cap: the store must decide (Eventual tables only; Ref gives
	// the key's entry to hand to the syncer).
	OverCap
	// StoreDown means the table is degraded with FailClosed.
	StoreDown
)

// String names the status.
func (s Status) String() string {
	switch s {
	case Allowed:
		return "allowed"
	case OverLimit:
		return "over-limit"
	case OverCap:
		return "over-cap"
	case StoreDown:
		return "store-down"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Verdict is the result of a check.
type Verdict struct {
	// Status says whether and why not.
	Status Status
	// Overflow is true when the key was decided on the shared overflow entry
	// because the cache was full.
	Overflow bool
	// Remaining is what the window has left after this check, as this instance
	// sees it.
	Remaining int64
	// ResetAfter is how long until nothing counted now is left in the window.
	ResetAfter time.Duration
	// RetryAfter is, for OverLimit, how long until the same cost could pass if
	// nothing else were admitted; -1 if it never can.
	RetryAfter time.Duration
}

// Ref is an opaque reference to one key's entry, handed to the syncer. Only the
// Table that produced it accepts it.
type Ref interface{ ref() }

// Bucket is a count in one sub-window.
type Bucket struct {
	Index int64 // bucket index: ⌊t/w⌋ on the store clock
	Count int64
}

// Health says how a table decides while the store is unreachable.
type Health uint32

const (
	// Healthy: the store is reachable; Eventual tables enforce the cap.
	Healthy Health = iota
	// FailLocal: enforce Limits.Share on this instance's own count.
	FailLocal
	// FailOpen: admit everything (still counting it, to push later).
	FailOpen
	// FailClosed: admit nothing; checks return StoreDown.
	FailClosed
)

// Limits are the parts of a table's behaviour that change while it runs.
type Limits struct {
	// Cap bounds this instance's unacknowledged count in the window (Eventual
	// tables while Healthy). NoCap disables it.
	Cap int64
	// Share bounds this instance's own count in the window while FailLocal.
	Share int64
	// Health is the store's state as the limiter sees it.
	Health Health
}

// NoCap is a Limits.Cap that never binds.
const NoCap = math.MaxInt64

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

// Config configures a Table.
type Config struct {
	// Geometry is the rule's window geometry.
	Geometry window.Sliding
	// Limit is the rule's limit per window.
	Limit int64
	// Eventual makes the table track dirty keys for the syncer and enforce the
	// divergence cap; otherwise it is Local: nothing leaves this process.
	Eventual bool
	// Keys is the key bound shared with other tables; required.
	Keys *Keys
}

// ErrConfig is wrapped by New's errors.
var ErrConfig = errors.New("localcache: bad config")

// New returns a Table for cfg.
func New(cfg Config) (*Table, error) {
	if cfg.Keys == nil {
		return nil, fmt.Errorf("%w: Keys is nil", ErrConfig)
	}
	if cfg.Limit < 1 || cfg.Limit > maxCount/4 {
		return nil, fmt.Errorf("%w: limit %d out of range", ErrConfig, cfg.Limit)
	}
	if cfg.Geometry.Buckets() < 1 {
		return nil, fmt.Errorf("%w: zero geometry", ErrConfig)
	}
	return newTable(cfg, max(cfg.Geometry.Span(), 2))
}
