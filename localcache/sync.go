package localcache

import (
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// What the syncer calls: the table's syncKeys implement the syncer's view of
// a rule's keys (drain the dirty keys, read their unacknowledged counts,
// settle what the store acknowledged and returned). A Ref that this table
// did not hand out is ignored.

// syncKeys is a Table as the syncer sees it (syncport.Keys): its methods are
// the syncer's side of the table, apart from the checks' side.
type syncKeys Table

// SyncKeys returns the table as the syncer sees it, for
// syncport.RuleConfig.Keys.
func (t *Table) SyncKeys() syncport.Keys { return (*syncKeys)(t) }

// syncView is t as the syncer sees it, for the table's own calls.
func (t *Table) syncView() *syncKeys { return (*syncKeys)(t) }

// entryOf returns the entry behind r, or nil if r is not one.
func entryOf(r verdict.Ref) *hdr {
	e, _ := r.(*hdr)
	return e
}

// Drain appends the keys admitted to since the last Drain, marking them
// clean, and returns the extended slice. Only one goroutine may drain.
func (sk *syncKeys) Drain(dst []verdict.Ref) []verdict.Ref {
	t := (*Table)(sk)
	for e := t.dirty.Swap(nil); e != nil; {
		next := t.tail(e).next.Load()
		t.tail(e).next.Store(nil)
		// Clean before the syncer reads pend: a later admission dirties
		// the entry again and queues it anew.
		e.state.CompareAndSwap(stDirty, stClean)
		dst = append(dst, e)
		e = next
	}
	return dst
}

// MarkDirty queues r for the next Drain again.
func (sk *syncKeys) MarkDirty(r verdict.Ref) {
	t := (*Table)(sk)
	e := entryOf(r)
	if e == nil || !t.eventual {
		return
	}
	for {
		st := e.state.Load()
		if st == stDirty {
			t.unpark(e)
			return
		}
		if st != stClean && st != stDead {
			return
		}
		if e.state.CompareAndSwap(st, stDirty) {
			t.push(e)
			return
		}
	}
}

// Key returns r's key.
func (sk *syncKeys) Key(r verdict.Ref) string {
	t := (*Table)(sk)
	e := entryOf(r)
	if e == nil || !t.eventual {
		return ""
	}
	return keyOf(e)
}

// Pending appends r's unacknowledged counts in buckets still inside the
// window at now.
func (sk *syncKeys) Pending(r verdict.Ref, now int64, dst []window.Bucket) []window.Bucket {
	t := (*Table)(sk)
	e := entryOf(r)
	if e == nil {
		return dst
	}
	k := t.geo.Index(now)
	for i := 0; i < t.ring; i++ {
		w := t.pend(e, i).Load()
		c := countOf(w)
		if c == 0 {
			continue
		}
		if d := distance(tagOf(w), k); d < int64(t.span) {
			j := k - d
			c -= t.covered(e, j, c) // covered by a lease: the store has them
			if c > 0 {
				dst = append(dst, window.Bucket{Index: j, Count: c})
			}
		}
	}
	return dst
}

// Settle records a sync of r: the totals of buckets first, first+1, … as the
// store returned them, the counts it acknowledged (they leave pend) and the
// lease it granted (lease.go: lease.Count units in bucket lease.Index, 0 for
// none); then refreshes r's budget at now. An answer dates the checks that
// follow: if the published time is in an earlier bucket than now, it
// publishes now first (publish). It returns the units the store
// counted that are no longer pending: taken back by a Refund (refund.go)
// after the syncer read them, for the syncer to push back as a negative
// correction (nil almost always).
func (sk *syncKeys) Settle(r verdict.Ref, now int64, acked []window.Bucket, first int64, totals []int64, lease window.Bucket) (over []window.Bucket) {
	t := (*Table)(sk)
	t.publish(now)
	e := entryOf(r)
	if e == nil {
		return nil
	}
	t.setLease(e, lease)
	k := t.geo.Index(now)
	for i, tot := range totals {
		j := first + int64(i)
		if j > k || k-j >= int64(t.span) {
			continue // not in this instance's window (clock offset): skip
		}
		t.glob(e, t.slotOf(j)).Store(pack(j, tot))
	}
	e.synced.Add(1) // see plan
	// Budget from the new totals while pend still holds what they now
	// include (counted twice: conservative), then lower pend, then widen.
	t.plan(e, now, nil)
	for _, b := range acked {
		si := t.slotOf(b.Index)
		if b.Index < first {
			// The store had already moved this bucket out of its window
			// and dropped the count (this clock runs a little behind the
			// store's). The count is still real here: keep it in the view,
			// or this instance would admit it again in that bucket.
			t.addGlob(e, si, b.Index, b.Count)
		}
		for {
			w := t.pend(e, si).Load()
			if tagOf(w) != b.Index&tagMask {
				break // the bucket left the window and its slot was reused
			}
			// A refund (refund.go) may have lowered pend below what was
			// pushed: the store counted the difference, which goes back.
			c := countOf(w) - b.Count
			if t.pend(e, si).CompareAndSwap(w, withCount(w, max(c, 0))) {
				if c < 0 {
					over = append(over, window.Bucket{Index: b.Index, Count: -c})
				}
				break
			}
		}
	}
	t.plan(e, now, nil)
	t.settled(e)
	return over
}

// addGlob adds n to slot si's glob word for bucket j.
func (t *Table) addGlob(e *hdr, si int, j, n int64) {
	g := t.glob(e, si)
	for {
		w := g.Load()
		c := countAt(w, j)
		if tagOf(w) != j&tagMask && distance(tagOf(w), j) < 0 {
			return // the slot holds a newer bucket: j is long gone
		}
		if g.CompareAndSwap(w, pack(j, c+n)) {
			return
		}
	}
}
