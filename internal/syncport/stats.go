package syncport

import "time"

// Fleet is what the syncer knows of the fleet and the store: the number of
// live instances, whether the others all count this one, and the store's
// health, with a count of their changes.
type Fleet struct {
	// Instances is N̂, the live instances at the last heartbeat (at least 1).
	Instances int
	// Joining reports that some live instance may not count this one in its
	// N̂ yet, or may hold counts it admitted on a cap sized without it: not
	// every instance the registry holds has heartbeated twice since this
	// one (re)registered (see syncer.Syncer.isJoining).
	Joining bool
	// Healthy reports whether the last round trip to the store succeeded.
	Healthy bool
	// Err is why the store was judged unhealthy (nil while it is healthy).
	// It wraps ErrWritesRefused if the store refuses writes,
	// apierr.ErrStoreConfig if it refuses this client.
	Err error
	// Changes counts the changes of Instances, Joining and Healthy, and of
	// the kind of Err (unreachable, refusing writes, refusing the client),
	// since New.
	Changes int64
}

// Stats are the syncer's counters since syncer.New.
type Stats struct {
	Cycles        int64         // full sync cycles run
	UrgentCycles  int64         // out-of-cycle syncs run for reservations (checks that waited)
	EarlySyncs    int64         // keys synced early, in the background, before their checks ran out of local allowance (leases asked ahead of a bucket included)
	KeySyncs      int64         // keys pushed and pulled (per-key calls and bulk-path keys answered)
	Deferred      int64         // dirty keys a cycle left for later: far from their limit and their cap (Keys.Need)
	Reservations  int64         // reservations decided by the store
	RoundTrips    int64         // pipelines and single calls sent
	Commands      int64         // commands sent (script calls, bulk-path pulls and heartbeats)
	Failures      int64         // round trips that failed
	Corrections   int64         // correction counts pushed
	Retried       int64         // batches resent after an ambiguous failure
	LastCycle     time.Duration // duration of the last full cycle
	LastCycleKeys int64         // keys synced in the last full cycle
	Instances     int64         // N̂ at the last heartbeat
	Offset        time.Duration // store clock minus local clock
	Healthy       bool          // the last round trip to the store succeeded
	Waits         Waits         // checks handed to the store for want of local allowance, by why (WindowStore.Waited)
	Rebuilds      int64         // losses of the store's data seen (a new epoch), each followed by a restore of the keys in view (rebuild.go)
}

// Waits counts the checks of Eventual keys that had no local allowance left
// and waited for the store, by why, as the caller saw the key's state when
// it handed the check over (WindowStore.Waited).
type Waits struct {
	Near  int64 // the window held 0.9·L or more with the check: no lease from the last tenth, the cap alone
	New   int64 // a key never synced here: its first admissions used its cap before its first sync came back
	Start int64 // a key whose lease was of an earlier bucket: the current one started on the cap alone
	Lease int64 // a key whose lease of the current bucket and cap ran out before more came
	Cap   int64 // a key without a lease whose cap ran out before a sync came back
}
