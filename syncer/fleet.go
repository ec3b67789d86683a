package syncer

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Fleet is what the syncer knows of the fleet and the store: the number of
// live instances and the store's health, with a count of their changes.
type Fleet struct {
	// Instances is N̂, the live instances at the last heartbeat (at least 1).
	Instances int
	// Healthy reports whether the last round trip to the store succeeded.
	Healthy bool
	// Err is why the store was judged unhealthy (nil while it is healthy).
	Err error
	// Changes counts the changes of Instances and Healthy since New.
	Changes int64
}

// Fleet returns the syncer's view of the fleet and the store.
func (s *Syncer) Fleet() Fleet {
	s.fleetMu.Lock()
	defer s.fleetMu.Unlock()
	return s.fleet
}

// Changed returns a channel that receives a value after Fleet changes (one
// value may stand for several changes: read Fleet after it). The syncer never
// waits on it: a user who reads it late reads the newest Fleet.
func (s *Syncer) Changed() <-chan struct{} { return s.changed }

// Instances returns N̂, the number of live instances at the last heartbeat
// (at least 1).
func (s *Syncer) Instances() int { return int(s.instances.Load()) }

// Healthy reports whether the last round trip to the store succeeded.
func (s *Syncer) Healthy() bool { return s.healthy.Load() }

// OldestHeartbeat returns the store time (ns) of the oldest heartbeat among
// the live instances, as the last heartbeat of this one read the registry:
// every live instance has started a sync cycle since. It assumes the fleet
// shares one InstanceTTL (one SyncInterval); 0 before the first heartbeat.
func (s *Syncer) OldestHeartbeat() int64 { return s.oldestBeat.Load() }

// publish records a change of the fleet view and signals it.
func (s *Syncer) publish(change func(f *Fleet) bool) {
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
	}
	s.healthy.Store(ok)
	s.publish(func(f *Fleet) bool {
		f.Err = err // the latest cause, also before the first success
		if f.Healthy == ok {
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
		err = fmt.Errorf("syncer: registry: %w", err)
		s.failed(err)
		return err
	}
	if len(v) != 5 {
		return fmt.Errorf("syncer: registry: unexpected reply %v", v)
	}
	sec, err1 := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
	usec, err2 := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
	n, ok := v[2].(int64)
	if err1 != nil || err2 != nil || !ok {
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
	ep, _ := v[4].(string)
	if mode == regBeat && (s.epoch == "" || ep == s.epoch) {
		// The script heartbeated (a caller of another epoch only looks):
		// the expiry it wrote, which the next call checks is still there.
		s.beatAt = sec*1000 + usec/1000 + s.cfg.InstanceTTL.Milliseconds()
	}
	s.lossSeen(ep)
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
	s.publish(func(f *Fleet) bool {
		if f.Instances == int(n) {
			return false
		}
		f.Instances = int(n)
		return true
	})
	return nil
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
