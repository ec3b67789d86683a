// Package apierr holds the errors that package sluice exports and its
// machinery (the engines, the syncer) returns, so that errors.Is matches
// them whichever package wrapped them. Package sluice documents them:
// sluice.ErrClosed, sluice.ErrStoreUnavailable, sluice.ErrStoreConfig.
package apierr

import "errors"

var (
	// ErrClosed is sluice.ErrClosed: the limiter was closed.
	ErrClosed = errors.New("sluice: limiter closed")
	// ErrStoreUnavailable is sluice.ErrStoreUnavailable: the check needed the
	// store, the store failed, and the failure mode is FailClosed.
	ErrStoreUnavailable = errors.New("sluice: store unavailable")
	// ErrStoreConfig is sluice.ErrStoreConfig: the store refuses this client
	// (authentication, an ACL, scripting disabled).
	ErrStoreConfig = errors.New("sluice: the store refuses this client")
)
