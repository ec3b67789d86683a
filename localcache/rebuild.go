package localcache

// What the syncer reads to rebuild a store that lost its data: each key's
// window as last pulled (the glob words), which the loss did not touch.

// View appends r's window as last pulled from the store: the total of every
// bucket inside the window at now that holds a count, a lease's units
// included (the store counted them at the grant, before a pull may have
// brought them).
func (t *Table) View(r Ref, now int64, dst []Bucket) []Bucket {
	e := entryOf(r)
	if e == nil || !t.eventual {
		return dst
	}
	k := t.geo.Index(now)
	for i := 0; i < t.span; i++ {
		j := k - int64(i)
		c := max(countAt(t.glob(e, t.slotOf(j)).Load(), j), t.leaseAt(e, j))
		if c > 0 {
			dst = append(dst, Bucket{Index: j, Count: c})
		}
	}
	return dst
}

// Viewed appends every key whose View at now holds a count. It walks every
// key.
func (t *Table) Viewed(dst []Ref, now int64) []Ref {
	if !t.eventual {
		return dst
	}
	var buf [1]Bucket
	t.m.Range(func(e *hdr) bool {
		if len(t.View(e, now, buf[:0])) > 0 {
			dst = append(dst, e)
		}
		return true
	})
	return dst
}
