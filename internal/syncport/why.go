package syncport

// Why says why a check of an Eventual key had no local allowance left
// (localcache.Table.Allow returned OverCap) and so waits for the store,
// from what this instance sees of the key at that moment: the table's
// Control().Why says it, WindowStore.Waited counts it (Stats.Waits).
type Why uint8

const (
	// WhyNear: the window as this instance sees it, the check included,
	// holds 0.9·L or more: no lease is granted from the last tenth of the
	// limit, so the divergence cap alone is left, by design.
	WhyNear Why = iota
	// WhyNew: the key has nothing in the window here but its own count of
	// the current bucket, never synced: its first admissions used its cap
	// before its first sync came back (a key hit hard at once).
	WhyNew
	// WhyStart: the key's lease was of an earlier bucket: the current one
	// started on the cap alone, and the early sync of its first admissions
	// had not come back.
	WhyStart
	// WhyLease: the key's lease of the current bucket and its cap were used
	// up before the early sync asking for more came back (a burst faster
	// than the round trip, or a lease sized on a slower bucket).
	WhyLease
	// WhyCap: the key holds no lease and has history: its cap ran out
	// before a sync came back (a key not busy enough to ask early, or whose
	// early sync was under way).
	WhyCap
	// NumWhy is the number of reasons.
	NumWhy
)
