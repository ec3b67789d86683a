// Package syncport holds what the syncer (package syncer) and the packages
// that use it share without exporting it from either: what the syncer asks
// of a rule's local key state (Keys, which package localcache implements),
// why a check waited for the store (Why), what the syncer reports as it
// goes (Observer, which package sluice implements), how the engines add
// their rules (Registry), what the limiter's loop follows (Watch), and the
// errors it returns to them.
package syncport

import "github.com/sluicehq/sluice/window"

// Keys is one rule's local key state, as the syncer needs it: the keys
// admitted to since the last drain, their unacknowledged counts, and where to
// hand back what the store acknowledged and returned. localcache.Table
// implements it (Table.SyncKeys). It lives apart from both so that neither
// exports the other's side: the local state does not know the syncer.
type Keys interface {
	// Drain appends the keys admitted to since the last Drain. Only the
	// syncer's loop calls it.
	Drain(dst []handle) []handle
	// Key returns h's key.
	Key(h handle) string
	// Pending appends h's unacknowledged counts in buckets still inside the
	// window at now.
	Pending(h handle, now int64, dst []window.Bucket) []window.Bucket
	// Settle records a sync of h: the totals of buckets first, first+1, …
	// as the store returned them (a lease granted is in them), the counts it
	// acknowledged, and the lease it granted: lease.Count units in bucket
	// lease.Index (0 units: none). It returns acknowledged units that are
	// no longer pending (refunded after Pending read them), for a negative
	// correction.
	Settle(h handle, now int64, acked []window.Bucket, first int64, totals []int64, lease window.Bucket) (over []window.Bucket)
	// Release ends h's lease of bucket j if that bucket is over at now (as
	// the checks see the time too), or with force: the units it covered
	// leave the pending counts (the store counted them at the grant), and
	// the units it did not use are returned, for the syncer to push as a
	// negative correction of bucket j. done is false while the bucket is
	// not over (the lease stays); true once it is ended, or if h holds none.
	Release(h handle, j, now int64, force bool) (unused int64, done bool)
	// Want returns how many units h should ask the store to lease it at
	// now: in proportion to what it has admitted in the current bucket, so
	// that unused units, which count in the window until they are given
	// back, stay below what it used; at least peak, the most units of a
	// lease it used in a bucket of the window, but never past holdMost.
	Want(h handle, now, peak int64) int64
	// NextWant returns how many units h should ask the store to lease it
	// at now in the bucket after the current one (ahead.go), given the
	// most units of a lease it used in a bucket of the window: about what
	// it admits in a bucket; 0 if a lease would not help it.
	NextWant(h handle, now, peak int64) int64
	// MarkDirty queues h for the next Drain again.
	MarkDirty(h handle)
	// Need reports whether h, drained by a cycle, needs a sync at now. A key
	// that does not keeps its counts pending, and is parked (Park).
	Need(h handle, now int64) bool
	// Park takes h, which Need found in no need of a sync, off the dirty
	// tracking until an admission takes it near its cap or its limit (or
	// MarkDirty queues it).
	Park(h handle)
	// Unsynced appends every key with unacknowledged counts in the window at
	// now, queued or not: a Flush syncs them all.
	Unsynced(dst []handle, now int64) []handle
	// Early appends the keys that asked for an early sync since the last
	// call: an admission left them half of their local allowance or less.
	// Only the syncer's loop calls it.
	Early(dst []handle) []handle
	// View appends h's window as last pulled from the store: the total of
	// every bucket inside the window at now that holds a count, for a
	// store that lost its data to be restored from (rebuild.go).
	View(h handle, now int64, dst []window.Bucket) []window.Bucket
	// Leased appends the units of h's leases, of a bucket in the window at
	// now or of the next one, that no pull has brought into its View.
	Leased(h handle, now int64, dst []window.Bucket) []window.Bucket
	// Viewed appends every key whose View or Leased at now holds a count.
	Viewed(dst []handle, now int64) []handle
	// OnEarly sets the function a key's request for an early sync calls,
	// once the key is queued; the syncer sets it when it adds the rule.
	OnEarly(wake func())
}

// handle is an opaque reference to one key's local state: the syncer only
// passes back what Keys gave it.
type handle = any
