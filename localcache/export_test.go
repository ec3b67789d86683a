package localcache

import "github.com/sluicehq/sluice/window"

// Bucket is a count in one sub-window (window.Bucket), named short for the
// tests.
type Bucket = window.Bucket

// held returns the units the table holds for key.
func (t *LeaseTable) held(key string) int64 {
	if e := t.entry(key); e != nil {
		return max(e.held.Load(), 0)
	}
	return 0
}

// maxKeys returns the bound.
func (k *Keys) maxKeys() int64 { return k.max }
