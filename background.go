package sluice

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/syncport"
)

// tickEvery is how often the published time advances.
const tickEvery = time.Millisecond

// localNow is the local clock in ns since the Unix epoch: the Clock, or the
// system clock read through the monotonic clock (immune to wall-clock steps).
func (l *Limiter) localNow() int64 {
	if l.clock != nil {
		return l.clock.Now().UnixNano()
	}
	return l.baseN + int64(time.Since(l.base))
}

// now is the store time in ns: the syncer's (local clock plus the measured
// offset), or the local clock without a store.
func (l *Limiter) now() int64 {
	if l.sync != nil {
		return l.sync.Now()
	}
	return l.localNow()
}

// tick publishes the time to every engine.
func (l *Limiter) tick() {
	now := l.now()
	s := l.set.Load()
	for _, r := range s.all {
		r.eng.Tick(now)
	}
	for _, r := range s.retired {
		r.eng.Tick(now)
	}
}

// applyFleet passes the syncer's view of the fleet on to the engines: N̂
// (at least MinInstances) and whether the store is down; it logs each
// change once.
func (l *Limiter) applyFleet() {
	l.fleetMu.Lock()
	defer l.fleetMu.Unlock()
	f := l.sync.Watch().Fleet()
	n := int64(max(f.Instances, l.opts.MinInstances, 1))
	if old := l.nhat.Swap(n); old != n {
		l.opts.Logger.Info("sluice: live instances changed", "from", old, "to", n)
	}
	if was := l.degraded.Swap(!f.Healthy); was != !f.Healthy {
		down := l.tel.setDown(!f.Healthy)
		if f.Healthy {
			l.storeState = storeHealthy
			l.opts.Logger.Info("sluice: store reachable again; checks decided locally within the error budget",
				"after", down.Round(time.Millisecond))
		}
	}
	if st := stateOf(f); st != l.storeState {
		// Once per change of the store's state, never per check or cycle:
		// also when a store that was unreachable answers but refuses.
		l.storeState = st
		attrs := []any{"failure_mode", l.opts.FailureMode.String(), "err", f.Err}
		switch st {
		case storeUnreachable:
			l.opts.Logger.Warn("sluice: store unreachable; checks that need it are decided by the failure mode", attrs...)
		case storeRefusesWrites:
			l.opts.Logger.Warn("sluice: store refuses writes; checks that need it are decided by the failure mode until it accepts them again", attrs...)
		case storeRefusesClient:
			l.opts.Logger.Error("sluice: store refuses this client (credentials or ACL permissions); checks that need it are decided by the failure mode", attrs...)
		}
	}
	l.setFleet(l.set.Load(), n, !f.Healthy)
}

// awaitJoined syncs every few ms while the syncer says the instance is
// joining, for at most 3·SyncInterval + Timeout if that is within a second
// plus Timeout (see New): a joining instance decides each key's first check
// on the store. With longer intervals, waiting would hold New for seconds.
func (l *Limiter) awaitJoined() {
	wait := 3 * l.opts.SyncInterval
	if wait > time.Second || !l.sync.Watch().Fleet().Joining {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait+l.opts.Timeout)
	defer cancel()
	poll := time.NewTicker(min(max(l.opts.SyncInterval/10, time.Millisecond), 10*time.Millisecond))
	defer poll.Stop()
	for l.sync.Watch().Fleet().Joining {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		}
		_ = l.sync.Flush(ctx) // a heartbeat: what ends joining
	}
}

// The store's states as the log reports them (storeState).
const (
	storeHealthy = iota
	storeUnreachable
	storeRefusesWrites
	storeRefusesClient
)

// stateOf returns the store's state in f.
func stateOf(f syncport.Fleet) int {
	switch {
	case f.Healthy:
		return storeHealthy
	case errors.Is(f.Err, ErrStoreConfig):
		return storeRefusesClient
	case errors.Is(f.Err, syncport.ErrWritesRefused):
		return storeRefusesWrites
	}
	return storeUnreachable
}

// background publishes the time every tickEvery, applies the fleet view
// when the syncer reports a change, sweeps idle keys, and starts counting
// checks once the application sets the global MeterProvider.
func (l *Limiter) background() {
	defer l.wg.Done()
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	var watch syncport.Watch
	var changed <-chan struct{}
	if l.sync != nil {
		watch = l.sync.Watch()
		changed = watch.Changed()
	}
	// Sweep about once per window of the shortest rule: keys are evicted
	// only once nothing of theirs is left in the window, so sweeping more
	// often finds little, and a sweep walks every key. A full cache asks
	// for an early sweep.
	var set *ruleSet
	var sweepEvery time.Duration
	lastSweep := time.Now()
	for {
		select {
		case <-l.stop:
			return
		case <-changed:
			l.applyFleet()
			continue
		case <-t.C:
		}
		// Every table gets the time, also those whose checks read the
		// clock themselves (a custom Clock, short sub-windows): the syncer
		// ends a lease only once the published time has left its bucket.
		l.tick()
		l.tel.watchGlobal()
		if watch != nil {
			watch.Pulse() // a late tick: a starved process, not a silent store
		}
		if s := l.set.Load(); s != set {
			set, sweepEvery = s, time.Minute
			for _, r := range set.all {
				sweepEvery = min(sweepEvery, max(r.window, time.Second))
			}
		}
		if time.Since(lastSweep) >= sweepEvery || (l.keys.Usage().Full() && time.Since(lastSweep) >= sweepEvery/10) {
			lastSweep = time.Now()
			now := l.now()
			for _, r := range set.all {
				l.tel.evicted.Add(int64(r.eng.Sweep(now)))
			}
			for _, r := range set.retired {
				l.tel.evicted.Add(int64(r.eng.Sweep(now)))
			}
		}
	}
}
