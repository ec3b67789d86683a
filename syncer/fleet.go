package syncer

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/syncport"
)

// Watch returns the side of the syncer that the limiter's background loop
// follows: the fleet view, its changes, and the loop's pulse.
func (s *Syncer) Watch() syncport.Watch { return watch{s} }

// watch is the view Watch returns.
type watch struct{ s *Syncer }

// Fleet returns the syncer's view of the fleet and the store (fleetView).
func (w watch) Fleet() syncport.Fleet { return w.s.fleetView() }

// Changed returns the channel that receives a value after the fleet view
// changes.
func (w watch) Changed() <-chan struct{} { return w.s.changed }

// Pulse records that the limiter's ticker ran (Syncer.pulse).
func (w watch) Pulse() { w.s.pulse() }

// fleetView returns the syncer's view of the fleet and the store.
func (s *Syncer) fleetView() syncport.Fleet {
	s.fleetMu.Lock()
	defer s.fleetMu.Unlock()
	return s.fleet
}

// isHealthy reports whether the last round trip to the store succeeded.
func (s *Syncer) isHealthy() bool { return s.healthy.Load() }

// isJoining reports that the fleet may not count this instance yet: a
// heartbeat (re)registered it and some other instance the registry holds
// has not heartbeated since, so that instance's N̂, and the divergence cap
// sized on it, may leave this one out (an instance alone in the registry is
// not joining: those that register later count it); or, back from an
// outage, a look found no entry of it (expired, or lost with the store's
// data). It ends once every other live instance has heartbeated twice
// since this one's registration, the second time after pushing what it
// admitted before it counted this one (uncounted): within two of their
// cycles when they are on time, within an InstanceTTL if one of them died
// without deregistering. Meanwhile checks should take no local allowance
// the store has not counted (a divergence cap of 0: see "Joining the fleet"
// in docs/design-bound.md). A syncer that never reached the store is not
// joining: its rules are on their failure mode. An instance that registers
// under the id of one still in the registry (a process restarted under the
// same InstanceID) is already counted, and is not joining either.
func (s *Syncer) isJoining() bool { return s.joining.Load() }

// oldestHeartbeat returns the store time (ns) of the oldest heartbeat among
// the live instances, as the last heartbeat of this one read the registry:
// every live instance has started a sync cycle since. It assumes the fleet
// shares one InstanceTTL (one SyncInterval); 0 before the first heartbeat.
func (s *Syncer) oldestHeartbeat() int64 { return s.oldestBeat.Load() }

// publish records a change of the fleet view and signals it.
func (s *Syncer) publish(change func(f *syncport.Fleet) bool) {
	s.fleetMu.Lock()
	changed := change(&s.fleet)
	if changed {
		s.fleet.Changes++
	}
	s.fleetMu.Unlock()
	if changed {
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}
}

func (s *Syncer) setHealth(ok bool, err error) {
	if ok {
		err = nil
	} else if s.refusing.Load() {
		s.refusals.Add(1) // any failure restarts the count of good cycles (health.go)
	}
	s.healthy.Store(ok)
	s.publish(func(f *syncport.Fleet) bool {
		same := causeOf(f.Err) == causeOf(err)
		f.Err = err // the latest cause, also before the first success
		if f.Healthy == ok && same {
			return false
		}
		f.Healthy = ok
		return true
	})
}

// heartbeat refreshes the registry entry, N̂ and the clock offset.
func (s *Syncer) heartbeat(ctx context.Context) error {
	return s.registry(ctx, regBeat)
}

// look refreshes N̂ and the clock offset as heartbeat does, without
// heartbeating: the instance's registry entry is left as it is.
func (s *Syncer) look(ctx context.Context) error {
	return s.registry(ctx, regLook)
}

func (s *Syncer) deregister(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	return s.registry(ctx, regRemove)
}

// What a registryScript call does with the instance's entry.
const (
	regBeat   = "0"
	regRemove = "1"
	regLook   = "2"
)

func (s *Syncer) registry(ctx context.Context, mode string) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	sent := s.localNow()
	s.stats.roundTrips.Add(1)
	s.stats.commands.Add(1)
	var beat string
	if s.beatAt > 0 {
		beat = strconv.FormatInt(s.beatAt, 10)
	}
	v, err := registryScript.Run(ctx, s.cfg.Client, []string{s.reg, s.epochKey}, s.cfg.InstanceID, s.cfg.InstanceTTL.Milliseconds(), mode, s.epoch, beat).Slice()
	recv := s.localNow()
	s.heard(err)
	if err != nil {
		return s.failed(fmt.Errorf("syncer: registry: %w", err))
	}
	if len(v) != 6 {
		return fmt.Errorf("syncer: registry: unexpected reply %v", v)
	}
	sec, err1 := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
	usec, err2 := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
	n, ok := v[2].(int64)
	absent, ok2 := v[4].(int64)
	if err1 != nil || err2 != nil || !ok || !ok2 {
		return fmt.Errorf("syncer: registry: unexpected reply %v", v)
	}
	if mode == regRemove {
		s.beatAt = 0
		return nil
	}
	store := sec*int64(time.Second) + usec*int64(time.Microsecond)
	s.offset.Store(s.clock.sample(store-(sent+recv)/2, recv-sent))
	// A loss is recorded before N̂ is read: the registry went with the
	// data, and N̂ holds (rebuild.go).
	ep, _ := v[5].(string)
	if mode == regBeat && (s.epoch == "" || ep == s.epoch) {
		// The script heartbeated (a caller of another epoch only looks):
		// the expiry it wrote, which the next call checks is still there.
		s.beatAt = sec*1000 + usec/1000 + s.cfg.InstanceTTL.Milliseconds()
	}
	if s.lossSeen(ep) {
		s.failed(s.lossErr(ep))
	}
	if first, err := strconv.ParseInt(fmt.Sprint(v[3]), 10, 64); err == nil && first > 0 {
		// Every live instance heartbeated at or after its expiry less
		// the TTL (the fleet's instances share it: it follows SyncInterval).
		s.oldestBeat.Store(first*int64(time.Millisecond) - int64(s.cfg.InstanceTTL))
	}
	n = max(n, 1)
	if s.holdUntil != 0 {
		if s.localNow() < s.holdUntil {
			n = max(n, s.held)
		} else {
			s.held, s.holdUntil = 0, 0
		}
	}
	s.instances.Store(n)
	// The script's now in whole ms, as the registry's scores hold it:
	// heartbeats are compared at that resolution, and one of the same ms
	// may have run before this one, so only a later one counts.
	at := (sec*1000 + usec/1000) * int64(time.Millisecond)
	joining := s.joining.Load()
	switch mode {
	case regBeat:
		if absent == 1 {
			s.joinedAt.Store(at)
		}
		if n <= 1 {
			// Alone in the registry: every instance that registers
			// later counts this one.
			s.joinedAt.Store(0)
		}
		joining = n > 1 && s.uncounted(at)
	case regLook:
		// Back from an outage the instance only looks: if its entry is
		// gone (expired, lost with the store's data, or never made), the
		// others' N̂ may no longer count it, until it registers again and
		// they heartbeat since.
		joining = joining || absent == 1
	}
	s.joining.Store(joining)
	s.publish(func(f *syncport.Fleet) bool {
		if f.Instances == int(n) && f.Joining == joining {
			return false
		}
		f.Instances, f.Joining = int(n), joining
		return true
	})
	return nil
}

// uncounted reports, after a heartbeat at store time at that found other
// live instances, whether some of them may not count this one yet or may
// still hold counts they admitted on caps sized without it. The oldest
// heartbeat is another's (this one's entry was just refreshed). Once every
// other instance has heartbeated since the registration, each counts this
// one in its N̂ from that heartbeat on; but what it admitted before, on a
// wider cap, reaches the store only with the pushes of the cycle that
// heartbeat began. So the instance stays joining until each has heartbeated
// once more after this one saw them all counting it (countedAt): a cycle
// pushes after its heartbeat, and the next heartbeat comes after those
// pushes. An instance found alone since its registration, or that never
// registered under a new entry (a restart under a live id), is already
// counted (joinedAt 0).
func (s *Syncer) uncounted(at int64) bool {
	joined := s.joinedAt.Load()
	if joined == 0 {
		return false
	}
	oldest := s.oldestBeat.Load()
	if oldest <= joined {
		return true
	}
	if s.countedAt.Load() <= joined {
		s.countedAt.Store(at)
	}
	return oldest <= s.countedAt.Load()
}

// offsetFilter keeps the clock offsets of the last few heartbeats and
// answers the one measured with the shortest round trip: the midpoint of a
// round trip is off by half its asymmetry, which a short one bounds best (as
// NTP does). A window of eight heartbeats follows a store clock that steps
// within a second at the default interval.
type offsetFilter struct {
	off, rtt [8]int64
	n, next  int
}

func (f *offsetFilter) sample(off, rtt int64) int64 {
	f.off[f.next], f.rtt[f.next] = off, rtt
	f.next = (f.next + 1) % len(f.off)
	f.n = min(f.n+1, len(f.off))
	best := 0
	for i := 1; i < f.n; i++ {
		if f.rtt[i] < f.rtt[best] {
			best = i
		}
	}
	return f.off[best]
}
