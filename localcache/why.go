package localcache

import (
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/verdict"
)

// why returns why a check of cost n of r's key at now had no local allowance
// left. A key without an entry (nil r) is syncport.WhyNew.
func (t *Table) why(r verdict.Ref, now, n int64) syncport.Why {
	e := entryOf(r)
	if e == nil {
		return syncport.WhyNew
	}
	v, own := t.seen(e, now)
	seen := v.others.Value()
	k := t.geo.Index(now)
	switch {
	case 10*(seen+float64(own+n)) >= 9*float64(t.limit.Load()):
		return syncport.WhyNear
	case t.leaseAt(e, k) > 0:
		return syncport.WhyLease
	case t.leaseAt(e, k-1) > 0:
		return syncport.WhyStart
	case seen == 0:
		return syncport.WhyNew
	}
	return syncport.WhyCap
}
