package syncport

import "time"

// Observer hears what the syncer does, for telemetry: its cycles, its
// urgent round trips, the store's errors, and how far the keys it pulls
// stand above their limits. The syncer's loop calls it, and so does the
// round trip of each Strict check of a TokenBucket, GCRA or SlidingLog rule
// (Urgent, StoreError): it must be safe for concurrent use and must not
// block.
type Observer interface {
	// Cycle reports a full sync cycle that started at start and took d: the
	// keys it synced, and its first error (nil: every count it collected is
	// acknowledged by the store).
	Cycle(start time.Time, d time.Duration, keys int, err error)
	// Urgent reports a round trip of checks handed to the store
	// (reservations: urgent syncs and Strict windows; or one Strict check of
	// a per-key algorithm), with the early syncs sent along: the checks it
	// carried, the keys, and its first error. A round trip of early syncs
	// alone is not reported (no check waited on it).
	Urgent(start time.Time, d time.Duration, checks, keys int, err error)
	// StoreError reports a failed round trip or an unreadable reply.
	StoreError(err error)
	// OverLimit reports a pulled key whose fleet total, as the store
	// returned it, stands above the rule's limit: excess is (total − Limit)
	// / Limit, > 0.
	OverLimit(rule string, excess float64)
}
