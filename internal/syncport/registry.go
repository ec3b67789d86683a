package syncport

import "time"

// Registry is the syncer's rule registration, as the engines use it when
// they set a rule up (syncer.Syncer.Rules): each kind of rule the store
// keeps, and the handle the rule's checks then call.
type Registry interface {
	// AddRule adds a window rule (an Eventual or Strict FixedWindow,
	// SlidingWindow or calendar quota) and returns its handle.
	AddRule(rc RuleConfig) (WindowStore, error)
	// AddGCRA adds a TokenBucket or GCRA rule of emission interval (ns)
	// and burst, whose keys' states the store keeps in a bucket of store
	// units.
	AddGCRA(name string, interval, burst, store int64) (GCRAStore, error)
	// AddLog adds a Strict SlidingLog rule of limit units per window.
	AddLog(name string, window time.Duration, limit int64) (LogStore, error)
}
