package syncport

// Watch is the side of the syncer that the limiter's background loop
// follows (syncer.Syncer.Watch): the fleet and the store's health as the
// syncer judges them, when they change, and the loop's own pulse, which
// tells a starved process from a silent store.
type Watch interface {
	// Fleet returns the syncer's view of the fleet and the store.
	Fleet() Fleet
	// Changed returns a channel that receives a value after Fleet changes
	// (one value may stand for several changes: read Fleet after it). The
	// syncer never waits on it: a reader who reads it late reads the
	// newest Fleet.
	Changed() <-chan struct{}
	// Pulse records that the limiter's ticker ran (every millisecond, in a
	// goroutine of its own): a late pulse means the process was starved.
	Pulse()
}
