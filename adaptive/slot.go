package adaptive

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Outcome is how a request that held a slot ended.
type Outcome uint8

// The outcomes.
const (
	// Success: the request completed; its latency is a sample of the
	// server's state.
	Success Outcome = iota
	// Dropped: the request timed out or was refused downstream for
	// overload; the algorithm decreases the limit.
	Dropped
	// Ignored: the request ended for a reason that says nothing about
	// load (the client went away, a bad request); it frees the slot and
	// is no sample.
	Ignored
)

// OutcomeOf maps a request's error to its Outcome: nil is Success,
// context.DeadlineExceeded (wrapped or not) Dropped, context.Canceled
// Ignored, and any other error Success (the server answered, however
// badly: its latency counts).
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return Success
	case errors.Is(err, context.DeadlineExceeded):
		return Dropped
	case errors.Is(err, context.Canceled):
		return Ignored
	}
	return Success
}

// slot is the state behind a Slot, pooled: gen counts its releases, so
// that a Slot whose generation is past releases nothing.
type slot struct {
	l        *Limiter
	gen      atomic.Uint64
	start    time.Time
	inflight int64
}

// Slot is a request's admission by a Limiter. The zero Slot, and the Slot
// of a refusal, hold nothing: OK is false and Release does nothing.
//
// Release the Slot once the request ends, on every path (defer it): a Slot
// never released holds its place in the limit forever. Releasing it again,
// or a copy of it, does nothing; so does releasing it after the Limiter's
// Close.
type Slot struct {
	s   *slot
	gen uint64
}

// OK reports whether the request was admitted (and holds a slot until
// released).
func (s Slot) OK() bool { return s.s != nil }

// Release frees the slot and reports the request's outcome to the limit's
// algorithm. Only the first Release of an admitted Slot does anything.
func (s Slot) Release(o Outcome) {
	if s.s == nil || !s.s.gen.CompareAndSwap(s.gen, s.gen+1) {
		return
	}
	l, start, inflight := s.s.l, s.s.start, s.s.inflight
	l.pool.Put(s.s)
	l.inflight.Add(-1)
	l.observe(start, inflight, o)
}

// Done releases the slot with OutcomeOf(err).
func (s Slot) Done(err error) { s.Release(OutcomeOf(err)) }
