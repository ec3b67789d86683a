package localcache

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// LogTable is the per-key state of a SlidingLog rule: the exact sliding log
// (reference.Log is its reference), one timestamp per admitted unit still in
// the window, in a per-key ring of at most Limit timestamps.
//
// Cost n is admitted at t if the units admitted in (t−W, t] plus n are at
// most Limit. The ring holds the admitted units in time order; a check
// first drops those that left the window (ts ≤ t − W), then the count is
// the ring's length. A denial's RetryAfter is exact: the (count+n−Limit)-th
// oldest timestamp plus W, when enough units have left. The ring starts
// small and doubles, up to Limit, only when the key's count in the window
// needs it: a key's memory follows the most it held at once, not the rule's
// Limit, and a check allocates only when its key reaches a new high.
//
// A per-key mutex guards the ring, unlike the other tables. An admission
// writes n timestamps and moves the ring's end, and the ring must stay in
// time order: several words that one compare-and-swap cannot publish
// together, and a reader that saw the end moved before the timestamps were
// written would count slots not yet filled. The lock is held for a few
// loads and stores (the drop of expired units is amortized: each unit is
// dropped once), never across anything that waits, and contention is per
// key: SlidingLog is for low limits (policy.MaxLogLimit), whose keys see
// few checks. A check whose clock reads earlier than the key's newest
// timestamp (another goroutine's later reading got in first) is decided at
// that newest time, so that the ring stays ordered.
//
// A key the admission rule keeps out of the table is decided on a windowed
// count-min sketch (winsketch.go), never on shared state; a new entry is
// seeded at its first check with what that sketch counted for its key
// (keyuntracked.go).
type LogTable struct {
	window    int64
	limit     int64
	keys      keyed[logEntry]
	geo       window.Sliding            // the sketch's: logSketchBuckets sub-windows, at least Window
	strangers atomic.Pointer[winSketch] // untracked keys' counts, allocated on first use
}

type logEntry struct {
	mu    sync.Mutex
	state uint8   // logUnseeded, logLive or logGone
	ring  []int64 // len is the capacity; the units are ring[head..head+size) mod len
	head  int
	size  int
	last  int64 // the newest timestamp: the ring's last unit while it has any
	// full is set, under mu, by a denial that found the log full: until
	// full.until nothing fits (the oldest unit must leave first), so a
	// check of one unit is denied without the lock (full.reset is when the
	// newest leaves). Its fields are exact, or later by as much as the
	// check's clock reads behind the key's newest unit (the locked path
	// decides such a check at that newest time). Refund clears it.
	full struct{ until, reset atomic.Int64 }
}

// A logEntry's states.
const (
	logUnseeded = iota // new: its first check seeds it from the sketch
	logLive
	logGone // evicted by Sweep
)

// logStart is the ring's first capacity.
const logStart = 4

// logSketchBuckets is the number of sub-windows of the sketch of untracked
// keys: a key's estimate counts up to one sub-window more than the window,
// so a key offered at most Limit·B/(B+1) per window, steadily, is never
// denied by it.
const logSketchBuckets = 10

// NewLogTable returns the table of a rule of limit units per window win,
// under the key bound keys.
func NewLogTable(win time.Duration, limit int64, keys *Keys) (*LogTable, error) {
	if keys == nil {
		return nil, fmt.Errorf("%w: Keys is nil", errConfig)
	}
	if win <= 0 || limit < 1 || limit > policy.MaxLogLimit {
		return nil, fmt.Errorf("%w: sliding log of %d per %v: the limit must be between 1 and %d", errConfig, limit, win, policy.MaxLogLimit)
	}
	// Whole sub-windows of at least win/B: the sketch's window is at
	// least the rule's, so it counts every unit still in the real one.
	sub := (int64(win) + logSketchBuckets - 1) / logSketchBuckets
	t := &LogTable{window: int64(win), limit: limit, geo: window.NewSliding(time.Duration(sub*logSketchBuckets), logSketchBuckets)}
	t.keys = newKeyed(keys, func() *logEntry { return &logEntry{ring: make([]int64, min(logStart, limit))} })
	return t, nil
}

// index returns the ring index of e's i-th oldest unit (0 ≤ i < len(e.ring)).
func (e *logEntry) index(i int) int {
	j := e.head + i
	if j >= len(e.ring) {
		j -= len(e.ring)
	}
	return j
}

// at returns the i-th oldest timestamp of e.
func (e *logEntry) at(i int) int64 { return e.ring[e.index(i)] }

// expire drops the units that left the window at now.
func (t *LogTable) expire(e *logEntry, now int64) {
	for e.size > 0 && e.ring[e.head] <= now-t.window {
		e.head++
		if e.head == len(e.ring) {
			e.head = 0
		}
		e.size--
	}
}

// grow makes room for need units, doubling the ring up to the limit.
func (t *LogTable) grow(e *logEntry, need int) {
	c := len(e.ring)
	for c < need {
		c *= 2
	}
	ring := make([]int64, min(int64(c), t.limit))
	for i := 0; i < e.size; i++ {
		ring[i] = e.at(i)
	}
	e.ring, e.head = ring, 0
}

// Allow decides cost n for key at now and records it if admitted.
func (t *LogTable) Allow(key string, now, n int64) verdict.Outcome {
	e := t.keys.lookup(key)
	if e == nil {
		return t.untracked(key, now, n)
	}
	if until := e.full.until.Load(); n == 1 && now < until {
		// A flood of denied checks on a full key takes no lock.
		return verdict.Outcome{ResetAfter: time.Duration(e.full.reset.Load() - now), RetryAfter: time.Duration(until - now)}
	}
	e.mu.Lock()
	for e.state != logLive {
		if e.state == logUnseeded {
			t.seed(e, key, now)
			continue
		}
		e.mu.Unlock()
		e = t.keys.replace(e, key)
		e.mu.Lock()
	}
	defer e.mu.Unlock()
	return t.decide(e, now, n)
}

// decide decides cost n at now on e, live and locked, and records it if
// admitted.
func (t *LogTable) decide(e *logEntry, now, n int64) verdict.Outcome {
	now = max(now, e.last)
	t.expire(e, now)
	c := int64(e.size)
	if n < 1 || c+n > t.limit {
		o := verdict.Outcome{Remaining: t.limit - c, ResetAfter: t.reset(e, now), RetryAfter: -1}
		if n >= 1 && n <= t.limit {
			// The oldest c+n−limit units must leave first.
			o.RetryAfter = time.Duration(e.at(int(c+n-t.limit)-1) + t.window - now)
		}
		if c == t.limit {
			e.full.reset.Store(e.last + t.window)
			e.full.until.Store(e.at(0) + t.window)
		}
		return o
	}
	if need := e.size + int(n); need > len(e.ring) {
		t.grow(e, need)
	}
	for i := 0; i < int(n); i++ {
		e.ring[e.index(e.size)] = now
		e.size++
	}
	e.last = now
	return verdict.Outcome{Allowed: true, Remaining: t.limit - int64(e.size), ResetAfter: time.Duration(t.window)}
}

// reset returns how long from now until every unit of e has left the
// window: the newest, e.last (the ring's last unit, kept apart so that a
// denial does not read the ring's far end).
func (t *LogTable) reset(e *logEntry, now int64) time.Duration {
	if e.size == 0 {
		return 0
	}
	return time.Duration(e.last + t.window - now)
}

// Peek returns what a check of one unit would see at now.
func (t *LogTable) Peek(key string, now int64) verdict.Outcome {
	if e, ok := t.keys.m.Load(key); ok {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.state == logLive {
			now = max(now, e.last)
			t.expire(e, now)
			rem := t.limit - int64(e.size)
			return verdict.Outcome{Allowed: rem >= 1, Remaining: rem, ResetAfter: t.reset(e, now)}
		}
	}
	// Untracked, not seeded yet, or gone: as the sketch counts it.
	rem := t.sketchRoom(key, now)
	return verdict.Outcome{Allowed: rem >= 1, Remaining: rem, ResetAfter: t.sketchReset(key, now)}
}

// Sweep evicts the keys with nothing left in the window at now.
func (t *LogTable) Sweep(now int64) (removed int) {
	t.keys.m.Range(func(key string, e *logEntry) bool {
		e.mu.Lock()
		if e.state == logLive {
			t.expire(e, max(now, e.last))
			if e.size == 0 {
				e.state = logGone
				t.keys.remove(key, e)
				removed++
			}
		}
		e.mu.Unlock()
		return true
	})
	return removed
}
