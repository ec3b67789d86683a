package localcache

import (
	"time"

	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
)

// control is a Table as the engine's rule glue sees it (tableport.Control):
// its clock, its limits, and what the store path and Peek read of a key,
// apart from the checks' side. Each method is the Table's own.
type control Table

// Control returns the table's control side, for the engine.
func (t *Table) Control() tableport.Control { return (*control)(t) }

// Tick is the table's tick (tableport.Control.Tick).
func (c *control) Tick(now int64) { (*Table)(c).tick(now) }

// SetLimits is the table's setLimits (tableport.Control.SetLimits).
func (c *control) SetLimits(l tableport.Limits) { (*Table)(c).setLimits(l) }

// SetLimit is the table's setLimit (tableport.Control.SetLimit).
func (c *control) SetLimit(limit int64) { (*Table)(c).setLimit(limit) }

// Limits is the table's limits (tableport.Control.Limits).
func (c *control) Limits() tableport.Limits { return (*Table)(c).limits() }

// Ref is the table's ref (tableport.Control.Ref).
func (c *control) Ref(key string) (verdict.Ref, bool) { return (*Table)(c).ref(key) }

// Why is the table's why (tableport.Control.Why).
func (c *control) Why(r verdict.Ref, now, n int64) syncport.Why {
	return (*Table)(c).why(r, now, n)
}

// RoomReset is the table's roomReset (tableport.Control.RoomReset).
func (c *control) RoomReset(key string, now int64) (int64, time.Duration) {
	return (*Table)(c).roomReset(key, now)
}

// Estimate is the table's estimate (tableport.Control.Estimate).
func (c *control) Estimate(key string, now int64) (float64, int64, bool) {
	return (*Table)(c).estimate(key, now)
}
