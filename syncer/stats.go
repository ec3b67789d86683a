package syncer

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/syncport"
)

// counters are the Stats counters, updated as the syncer goes.
type counters struct {
	cycles, urgentCycles, earlySyncs, deferred, keySyncs, reservations, roundTrips, commands,
	failures, corrections, retried, lastCycle, lastCycleKeys, rebuilds atomic.Int64
	waits [syncport.NumWhy]atomic.Int64
}
