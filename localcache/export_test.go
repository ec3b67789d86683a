package localcache

import (
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/window"
)

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

// size returns the number of keys the table tracks.
func (t *Table) size() int { return t.m.Len() }

func (t *GCRATable) size() int { return t.keys.Len() }
func (t *WarmTable) size() int { return t.keys.Len() }
func (t *LogTable) size() int  { return t.keys.Len() }

// sizeOf returns the number of keys a KeyTable tracks.
func sizeOf(kt tableport.KeyTable) int { return kt.(interface{ size() int }).size() }
