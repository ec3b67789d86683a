package syncport

import "errors"

// Errors of the syncer's Reserve and of its rules' round trips.
var (
	// ErrUnavailable means the store could not be reached, or is marked
	// unhealthy.
	ErrUnavailable = errors.New("syncer: store unavailable")
	// ErrTimeout means the store did not answer within the timeout.
	ErrTimeout = errors.New("syncer: store did not answer in time")
	// ErrClosed means the syncer was closed.
	ErrClosed = errors.New("syncer: closed")
)

// ErrWritesRefused is wrapped by the syncer's Fleet.Err and Check, besides
// apierr.ErrStoreConfig (the store refuses this client: authentication, ACL
// permissions, or scripting disabled; the error says what to change): the
// store answers but refuses writes: out of memory (maxmemory with
// noeviction), a read-only replica, or a failed snapshot (MISCONF).
var ErrWritesRefused = errors.New("sluice: the store refuses writes")
