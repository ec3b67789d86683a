// Package apierr holds the errors that package sluice exports and its
// machinery (the engines, the syncer) returns, so that errors.Is matches
// them whichever package wrapped them. Package sluice documents them:
// sluice.ErrClosed, sluice.ErrStoreUnavailable, sluice.ErrStoreConfig.
package apierr

import "errors"

var (
	// Closed is sluice.ErrClosed: the limiter was closed.
	Closed = errors.New("sluice: limiter closed")
	// StoreUnavailable is sluice.ErrStoreUnavailable: the check needed the
	// store, the store failed, and the failure mode is FailClosed.
	StoreUnavailable = errors.New("sluice: store unavailable")
	// StoreConfig is sluice.ErrStoreConfig: the store refuses this client
	// (authentication, an ACL, scripting disabled).
	StoreConfig = errors.New("sluice: the store refuses this client")
)
