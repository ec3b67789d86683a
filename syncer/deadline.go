package syncer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/syncport"
)

// A hung store (a stopped process, a blackholed connection) is judged down
// by sluice's own deadline, whatever the client's options: a default
// go-redis client waits out a hung store's socket read, seconds, before it
// reports an error, and a check must not wait that long for its failure
// mode. A loaded store, or a process starved of CPU, answers late; it must
// not be judged down, since an instance that alone decides by its failure
// mode admits its part of the limit outside the fleet's count. So the
// store is judged down only when all of these hold:
//
//   - timeoutsDown checks in a row that needed the store got no answer
//     within Timeout;
//   - nothing at all has answered for silentDown: no sync call, no
//     reservation, no heartbeat, no strict check (any reply counts, a Redis
//     error reply too);
//   - this process was not starved meanwhile: silence proves nothing while
//     the process itself could not run (every core busy, a long pause), for
//     the replies may wait unread. The limiter's ticker pulses every
//     millisecond; a gap of starveGap or more between two pulses makes the
//     next silentDown of silence count for nothing;
//   - a probe (PING) sent then gets no answer within probeWait, while no
//     goroutine waited starveGap or more for a CPU (the runtime's
//     scheduling latencies, longWaits): the ticker's goroutine, woken by a
//     timer, runs next on its P, but one woken by a network reply joins
//     the back of a run queue, behind every busy goroutine, so replies can
//     wait unread while the pulses keep time. If one did, the probe proves
//     nothing, and silence counts for nothing as after a late pulse — for
//     doubtsDown probes in a row at most: a reply waits unread behind busy
//     goroutines for tens of milliseconds, not through probe after probe
//     seconds apart, and a process starved for good must still see a hung
//     store judged down.

// doubtsDown is how many probes in a row the scheduling latencies may leave
// inconclusive; the next one that gets no answer judges the store down.
const doubtsDown = 2

// starveGap is the longest gap between two Pulses that still shows a
// process able to run its goroutines on time.
const starveGap = 25 * time.Millisecond

// pulse records that the limiter's ticker ran (every millisecond, in a
// goroutine of its own; syncport.Watch.Pulse): a late pulse means the
// process was starved.
func (s *Syncer) pulse() {
	now := s.localNow()
	if last := s.lastPulse.Swap(now); last != 0 && now-last >= int64(starveGap) {
		s.starved.Store(now + int64(s.silentDown()))
	}
}

// timeoutsDown is how many checks in a row may go unanswered within
// Timeout before the store is suspected.
const timeoutsDown = 3

// silentDown is how long the store must have answered nothing before
// timeouts make it suspect: long enough that a starved process or a loaded
// store, which answers within a few hundred ms, is not.
func (s *Syncer) silentDown() time.Duration {
	return max(timeoutsDown*s.cfg.Timeout, 2*s.cfg.Interval, 500*time.Millisecond)
}

// probeWait is how long the probe that confirms a suspected hang waits.
func (s *Syncer) probeWait() time.Duration {
	return max(2*s.cfg.Timeout, 250*time.Millisecond)
}

// answered records that the store answered a round trip.
func (s *Syncer) answered() {
	s.timeouts.Store(0)
	s.lastAnswer.Store(s.localNow())
	if s.doubts.Load() != 0 {
		s.doubts.Store(0)
	}
}

// heard records the store's answer to a round trip whose result is err, if
// it is one (replied). Every kind of round trip calls it where it ends: the
// registry (heartbeats), the sync pipelines (bulk and per-key, which carry
// the reservations), strict checks and the probe.
func (s *Syncer) heard(err error) {
	if replied(err) {
		s.answered()
	}
}

// replied reports whether a round trip whose result is err got the store's
// reply: a reply, even a Redis error reply, is an answer; a network error or
// a timeout is not.
func replied(err error) bool {
	var rerr redis.Error
	return err == nil || errors.As(err, &rerr)
}

// timedOut counts a check the store did not answer within Timeout, and at
// timeoutsDown in a row after silentDown of silence starts the probe (one at
// a time).
func (s *Syncer) timedOut() {
	n := s.timeouts.Add(1)
	if n < timeoutsDown || !s.healthy.Load() {
		return
	}
	now := s.localNow()
	silent := time.Duration(now - s.lastAnswer.Load())
	if silent < s.silentDown() || now < s.starved.Load() || !s.probing.CompareAndSwap(false, true) {
		return
	}
	go s.probe(n, silent)
}

// probe sends a PING and judges the store down if it is not answered within
// probeWait (the round trip itself may go on, in its goroutine, until the
// client gives up).
func (s *Syncer) probe(n int64, silent time.Duration) {
	defer s.probing.Store(false)
	waits := s.longWaits()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(s.life, s.cfg.OpTimeout)
		defer cancel()
		err := s.cfg.Client.Ping(ctx).Err()
		s.heard(err)
		done <- err
	}()
	timer := time.NewTimer(s.probeWait())
	defer timer.Stop()
	select {
	case err := <-done:
		if replied(err) {
			return // it answers: slow, not hung
		}
		s.down(fmt.Errorf("%w: %d checks in a row got no answer within %v, nothing else for %v, and a probe failed: %w", syncport.ErrTimeout, n, s.cfg.Timeout, silent.Round(time.Millisecond), err))
	case <-timer.C:
		select {
		case err := <-done: // both were ready: the reply came in time
			if replied(err) {
				return
			}
		default:
		}
		if s.longWaits() > waits && s.doubts.Add(1) <= doubtsDown {
			// Goroutines waited starveGap or more for a CPU meanwhile: the
			// reply may be waiting unread. Inconclusive, as after a late
			// Pulse, unless the probes before were too.
			s.starved.Store(s.localNow() + int64(s.silentDown()))
			return
		}
		s.down(fmt.Errorf("%w: %d checks in a row got no answer within %v, nothing else for %v, nor a probe for %v", syncport.ErrTimeout, n, s.cfg.Timeout, silent.Round(time.Millisecond), s.probeWait()))
	case <-s.done:
	}
}

// down marks the store down: checks decide by their failure mode at once,
// until a heartbeat succeeds.
func (s *Syncer) down(err error) {
	s.setHealth(false, err)
	s.failWaiters(syncport.ErrUnavailable)
}
