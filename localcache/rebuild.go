package localcache

import (
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// What the syncer reads to rebuild a store that lost its data: each key's
// window as last pulled (the glob words), which the loss did not touch, and
// the leases this instance holds that no pull has brought into it.

// View appends r's window as last pulled from the store: the total of every
// bucket inside the window at now that holds a count. A pull returns the
// grants of the next bucket's leases within the current bucket's total,
// so the view of the bucket a pull last saw as current holds them too.
func (sk *syncKeys) View(r verdict.Ref, now int64, dst []window.Bucket) []window.Bucket {
	t := (*Table)(sk)
	e := entryOf(r)
	if e == nil || !t.eventual {
		return dst
	}
	k := t.geo.Index(now)
	for i := 0; i < t.span; i++ {
		j := k - int64(i)
		if c := countAt(t.glob(e, t.slotOf(j)).Load(), j); c > 0 {
			dst = append(dst, window.Bucket{Index: j, Count: c})
		}
	}
	return dst
}

// Leased appends the units of r's leases that no pull has brought into its
// view: a lease of a bucket inside the window at now, or of the next one,
// that no pull since that bucket started has counted (a pull during the
// bucket counts every lease of it, granted before). Only this instance
// knows them: each instance restores its own.
func (sk *syncKeys) Leased(r verdict.Ref, now int64, dst []window.Bucket) []window.Bucket {
	t := (*Table)(sk)
	e := entryOf(r)
	if e == nil || !t.eventual {
		return dst
	}
	k := t.geo.Index(now)
	for j := k - int64(t.span) + 1; j <= k+1; j++ {
		l := t.leaseAt(e, j)
		if l > 0 && (j > k || tagOf(t.glob(e, t.slotOf(j)).Load()) != j&tagMask) {
			dst = append(dst, window.Bucket{Index: j, Count: l})
		}
	}
	return dst
}

// Viewed appends every key whose View or Leased at now holds a count. It
// walks every key.
func (sk *syncKeys) Viewed(dst []verdict.Ref, now int64) []verdict.Ref {
	t := (*Table)(sk)
	if !t.eventual {
		return dst
	}
	var buf []window.Bucket // reused: it grows to a key's span once
	t.m.Range(func(e *hdr) bool {
		buf = sk.View(e, now, buf[:0])
		if len(buf) == 0 {
			buf = sk.Leased(e, now, buf)
		}
		if len(buf) > 0 {
			dst = append(dst, e)
		}
		return true
	})
	return dst
}
