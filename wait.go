package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrTooManyWaiters means Wait found Options.MaxWaiters callers already
// queued on the same rule and key on this instance: the request is refused
// at once, as a denial would be.
var ErrTooManyWaiters = errors.New("sluice: too many waiters")

// minWaitStep is the shortest sleep between two tries of a queue's head: a
// denial without a useful RetryAfter (0) must not spin.
const minWaitStep = 100 * time.Microsecond

// waitAdmitted, if set (by tests only), is called with a queued waiter's
// context when it is admitted, before the next waiter may try.
var waitAdmitted func(ctx context.Context)

// waitKey names a queue: one rule and key.
type waitKey struct {
	r   *rule
	key string
}

// waitQueue is the FIFO of Wait callers on one rule and key. Only its head
// tries the limiter; the others sleep on their ready channel until the head
// hands over. Guarded by Limiter.waitMu.
type waitQueue struct {
	head, tail *waiter
	n          int
	notBefore  time.Time // the head's next try: no one queued is admitted earlier
}

// waiter is one queued Wait.
type waiter struct {
	prev, next *waiter
	ready      chan struct{} // closed when the waiter becomes the head
}

// Wait blocks until one request for key under the named rule is admitted,
// or ctx ends. See WaitN.
func (l *Limiter) Wait(ctx context.Context, rule, key string) error {
	return l.WaitN(ctx, rule, key, 1)
}

// WaitN blocks until cost n for key under the named rule is admitted (and
// counted), or ctx ends: the leaky bucket as a queue, where Allow would
// deny. Callers waiting on the same rule and key on this instance are
// admitted in the order they started waiting; only the first of them asks
// the limiter, after the RetryAfter of its last denial, so a queue costs
// one check per admission. The queue is local: other instances, and Allow
// on this one, do not wait behind it.
//
// WaitN returns at once with an error that wraps
// context.DeadlineExceeded when ctx's deadline comes before the earliest
// moment the cost could be admitted (the RetryAfter of a denial, or the
// next try of the callers queued ahead); with ErrTooManyWaiters when
// Options.MaxWaiters callers already wait on the rule and key; with ctx's
// error when ctx ends while waiting; and with AllowN's errors (unknown
// rule, invalid cost, closed limiter, store failure under [policy.FailClosed]).
// A caller that gives up leaves nothing behind: no goroutine, no timer, no
// queue entry.
//
// A request admitted at once costs what AllowN costs; a queued one
// allocates its place in the queue and a timer. Waiting runs on the system
// clock, whatever Options.Clock says. A nil ctx is context.Background.
func (l *Limiter) WaitN(ctx context.Context, rule, key string, n int64) error {
	if ctx == nil {
		ctx = context.Background()
	}
	r := l.rule(rule)
	if r != nil && r.over != nil {
		r = r.tier(key)
	}
	if r == nil || n < 1 || n > r.maxCost || len(key) > l.opts.MaxKeyLength || l.closed.Load() {
		_, err := l.reject(r, rule, key, n)
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	wk := waitKey{r: r, key: key}
	var ra time.Duration // the RetryAfter of a first try, if the queue was empty
	l.waitMu.Lock()
	q := l.queues[wk]
	if q == nil {
		l.waitMu.Unlock()
		d, err := l.take(ctx, r, key, n)
		if err != nil || d.Allowed {
			return err
		}
		ra = d.RetryAfter
		l.waitMu.Lock()
		q = l.queues[wk]
	}
	w, err := l.enqueue(ctx, wk, q, ra)
	l.waitMu.Unlock()
	if err != nil {
		return err
	}
	return l.serve(ctx, wk, w, n, ra)
}

// enqueue adds a waiter at the tail of wk's queue q (nil: none yet), after
// the deadline and bound checks; ra is the RetryAfter of a try made just
// before (0: none). Called with waitMu held.
func (l *Limiter) enqueue(ctx context.Context, wk waitKey, q *waitQueue, ra time.Duration) (*waiter, error) {
	earliest := time.Now().Add(ra)
	if q != nil && q.notBefore.After(earliest) {
		earliest = q.notBefore
	}
	if dl, ok := ctx.Deadline(); ok && dl.Before(earliest) {
		return nil, fmt.Errorf("sluice: wait for rule %q, key %q: the earliest admission is in %v, after the context's deadline: %w",
			wk.r.name, wk.key, time.Until(earliest).Round(time.Microsecond), context.DeadlineExceeded)
	}
	if q == nil {
		q = &waitQueue{}
		if l.queues == nil {
			l.queues = make(map[waitKey]*waitQueue)
		}
		l.queues[wk] = q
	}
	if q.n >= l.opts.MaxWaiters {
		return nil, fmt.Errorf("%w: %d callers wait for rule %q, key %q on this instance (Options.MaxWaiters)", ErrTooManyWaiters, q.n, wk.r.name, wk.key)
	}
	w := &waiter{ready: make(chan struct{}), prev: q.tail}
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
		q.notBefore = earliest
		close(w.ready)
	}
	q.tail = w
	q.n++
	l.waiters.Add(1)
	return w, nil
}

// serve waits for w's turn, then tries until admitted; ra is the RetryAfter
// of a try made before w was queued.
func (l *Limiter) serve(ctx context.Context, wk waitKey, w *waiter, n int64, ra time.Duration) error {
	defer l.leave(wk, w)
	select {
	case <-w.ready:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.stop:
		return ErrClosed
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if ra > 0 {
			ra = max(ra, minWaitStep)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < ra {
				return fmt.Errorf("sluice: wait for rule %q, key %q: the next admission is in %v, after the context's deadline: %w",
					wk.r.name, wk.key, ra, context.DeadlineExceeded)
			}
			if timer == nil {
				timer = time.NewTimer(ra)
			} else {
				timer.Reset(ra)
			}
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			case <-l.stop:
				return ErrClosed
			}
		}
		d, err := l.take(ctx, wk.r, wk.key, n)
		if err != nil {
			return err
		}
		if d.Allowed {
			if h := waitAdmitted; h != nil {
				h(ctx) // tests: the order of admissions, before the next head may try
			}
			return nil
		}
		ra = max(d.RetryAfter, minWaitStep)
		l.waitMu.Lock()
		if q := l.queues[wk]; q != nil {
			q.notBefore = time.Now().Add(ra)
		}
		l.waitMu.Unlock()
	}
}

// take is AllowN for a validated check, decided on the clock rather than
// the time published every millisecond: a waiter retries at the moment its
// RetryAfter said, which the published time may not have reached yet.
func (l *Limiter) take(ctx context.Context, r *rule, key string, n int64) (Decision, error) {
	if l.closed.Load() {
		return Decision{Limit: r.limit}, ErrClosed
	}
	if r.capacity != nil {
		return l.allowElastic(ctx, r, key, n)
	}
	res, _, err := r.eng.Take(ctx, key, n)
	d := decision(res, r.limit)
	r.count(d, err)
	return r.shape(d, err)
}

// leave takes w out of wk's queue; if w was the head, the next waiter
// becomes the head, and an empty queue is dropped.
func (l *Limiter) leave(wk waitKey, w *waiter) {
	l.waitMu.Lock()
	defer l.waitMu.Unlock()
	q := l.queues[wk]
	if q == nil {
		return
	}
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
		if q.head != nil {
			close(q.head.ready)
		}
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
	q.n--
	l.waiters.Add(-1)
	if q.n == 0 {
		delete(l.queues, wk)
	}
}
