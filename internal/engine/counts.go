package engine

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/rawmem"
)

// Path is how a check was decided, for the metrics: on this instance's
// state, by the store, or by the failure mode.
type Path uint8

// The paths of a check.
const (
	// PathLocal: decided on this instance's state, without the store (also
	// while the store is down, within the instance's share).
	PathLocal Path = iota
	// PathUrgent: an Eventual rule's check decided by the store (a key at
	// its divergence cap, or a key the cache does not track).
	PathUrgent
	// PathStrict: a Strict rule's check decided by the store.
	PathStrict
	// PathFallback: the check needed the store, which failed it or did not
	// answer in time; the failure mode decided.
	PathFallback
	// PathShadow: a shadow rule's check (decided, never denied).
	PathShadow
	// PathSoft: a check admitted in a rule's soft band, past Limit.
	PathSoft
	// NumPaths is the number of paths.
	NumPaths
)

// String names the path as the metrics do.
func (p Path) String() string {
	switch p {
	case PathLocal:
		return "local"
	case PathUrgent:
		return "urgent"
	case PathStrict:
		return "strict"
	case PathFallback:
		return "fallback"
	case PathShadow:
		return "shadow"
	case PathSoft:
		return "soft"
	}
	return "unknown"
}

// Outcome is the result of a check, for the metrics.
type Outcome uint8

// The outcomes of a check.
const (
	// OutcomeAllowed: the cost was admitted.
	OutcomeAllowed Outcome = iota
	// OutcomeDenied: the cost was denied (a result, not an error).
	OutcomeDenied
	// OutcomeError: the check returned an error.
	OutcomeError
	// NumOutcomes is the number of outcomes.
	NumOutcomes
)

// String names the outcome as the metrics do.
func (o Outcome) String() string {
	switch o {
	case OutcomeAllowed:
		return "allowed"
	case OutcomeDenied:
		return "denied"
	case OutcomeError:
		return "error"
	}
	return "unknown"
}

// OutcomeOf returns the outcome of a check that returned allowed and err.
func OutcomeOf(allowed bool, err error) Outcome {
	switch {
	case err != nil:
		return OutcomeError
	case allowed:
		return OutcomeAllowed
	}
	return OutcomeDenied
}

// countStripes is the number of stripes of the per-check counters: checks
// on different goroutines mostly land on different cache lines.
const countStripes = 16

// stripe is one stripe of the per-check counters, alone on its cache lines
// (128 bytes: the adjacent-line prefetcher pairs 64-byte lines).
type stripe struct {
	n [NumOutcomes]atomic.Uint64
	_ [128 - 8*NumOutcomes]byte
}

// Counts counts a rule's checks by outcome and path, for the metrics. Every
// check is counted once by the limiter (Check, on striped counters: one
// atomic add on a line that goroutine mostly has to itself); the store and
// failure-mode paths, which are slow anyway, also count themselves by path
// (Add). The local path is what is left: Snapshot derives it. A nil *Counts
// counts nothing, nor does a paused one (Pause).
type Counts struct {
	all   [countStripes]stripe
	paths [NumPaths][NumOutcomes]atomic.Uint64 // PathLocal unused
	_     [64]byte
	// local is the last local count Snapshot returned: it never goes back
	// (see Snapshot).
	local [NumOutcomes]atomic.Uint64
	// paused is read by every check: on a line of its own, off local,
	// which every Snapshot writes.
	_      [64]byte
	paused atomic.Bool
}

// Check counts one check of the outcome; every check is counted here once,
// whatever its path.
func (c *Counts) Check(o Outcome) {
	if c == nil || c.paused.Load() {
		return
	}
	c.all[stripeIndex()].n[o].Add(1)
}

// Add counts a check of outcome o on path p (p is not PathLocal); the check
// is also counted by Check.
func (c *Counts) Add(p Path, o Outcome) {
	if c == nil || p == PathLocal || p >= NumPaths || o >= NumOutcomes || c.paused.Load() {
		return
	}
	c.paths[p][o].Add(1)
}

// Pause stops counting until Resume: a paused Counts costs a check one load
// of a word nothing writes, where counting costs an atomic add. Snapshot
// returns the checks counted while not paused. A check on a store path in
// flight across Resume may be counted in the total but not on its path: the
// local count then holds it.
func (c *Counts) Pause() { c.paused.Store(true) }

// Resume starts counting again after Pause.
func (c *Counts) Resume() { c.paused.Store(false) }

// stripeIndex picks a stripe from the address of the calling goroutine's
// stack: goroutines have stacks of their own, so concurrent checks rarely
// share a stripe, and a goroutine mostly stays on its own.
func stripeIndex() int {
	p := uint64(rawmem.StackAddr()) >> 11      // stacks are at least 2 KiB apart
	return int((p * 0x9E3779B97F4A7C15) >> 60) // 16 stripes
}

// Snapshot returns the checks counted so far, by path and outcome. A check
// on a store path is counted there before the limiter counts it in the
// total, so a snapshot taken while it is in flight may see it on its path
// but not in the total: the local count derived then can only fall short,
// never exceed, and Snapshot never returns less than it returned before.
// Without checks in flight it is exact.
func (c *Counts) Snapshot() (s [NumPaths][NumOutcomes]uint64) {
	if c == nil {
		return s
	}
	for o := range NumOutcomes {
		var all uint64
		for i := range c.all {
			all += c.all[i].n[o].Load()
		}
		other := uint64(0)
		for p := PathLocal + 1; p < NumPaths; p++ {
			v := c.paths[p][o].Load()
			s[p][o] = v
			other += v
		}
		local := uint64(0)
		if all > other {
			local = all - other
		}
		for {
			prev := c.local[o].Load()
			if local <= prev {
				local = prev
				break
			}
			if c.local[o].CompareAndSwap(prev, local) {
				break
			}
		}
		s[PathLocal][o] = local
	}
	return s
}
