package sluice

import "github.com/sluicehq/sluice/syncer"

// Stats is a snapshot of a limiter's counters.
type Stats struct {
	// Keys is the number of keys tracked locally, across rules.
	Keys int64
	// Instances is N̂, the live-instance estimate used for the caps.
	Instances int64
	// Degraded reports whether the store is considered unreachable.
	Degraded bool
	// Sync holds the syncer's counters (zero without a store).
	Sync syncer.Stats
	// Waiters is the number of Wait and WaitN calls queued now.
	Waiters int64
}

// Stats returns the limiter's counters.
func (l *Limiter) Stats() Stats {
	s := Stats{Keys: l.keys.Len(), Instances: l.nhat.Load(), Degraded: l.degraded.Load(), Waiters: l.waiters.Load()}
	if l.sync != nil {
		s.Sync = l.sync.Stats()
	}
	return s
}
