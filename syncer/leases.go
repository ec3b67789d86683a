package syncer

// leased is what a key holds of the store's leases: at most one per bucket
// parity, the current bucket's and the next one's (a lease of bucket j in
// slot j&1), as the local state keeps them, with the units granted in each.
type leased struct {
	ref    handle
	bucket [2]int64
	units  [2]int64
	held   [2]bool
}

// holdLease records that id holds n more units of a lease of bucket j. It
// returns false, and the caller gives the grant back, if bucket j is over on
// this instance's clock (its offset to the store's is off by more than the
// time to the bucket's end: no check counts in j any more, and held, the
// grant would stop every other until the next cycle), or if j's slot holds
// a lease of another bucket that cannot end yet (the checks may still admit
// on it).
func (s *Syncer) holdLease(id keyID, ref handle, j, n int64) bool {
	if j < id.rule.geo.Index(s.Now()) {
		return false
	}
	slot := j & 1
	if l, ok := s.leases[id]; ok && l.held[slot] && l.bucket[slot] != j && !s.release(id, slot, false) {
		return false
	}
	l := s.leases[id] // release may have changed it
	l.ref = ref
	if !l.held[slot] {
		l.bucket[slot], l.units[slot], l.held[slot] = j, 0, true
	}
	l.units[slot] += n
	s.leases[id] = l
	s.used(id, ref, j, 0)
	return true
}

// release ends id's lease in the given slot if its bucket is over (or with
// force), and queues the units it did not use as a negative correction of
// its bucket; it reports whether the lease is ended (or there was none).
// What the key used of it is noted for the leases ahead (ahead.go).
func (s *Syncer) release(id keyID, slot int64, force bool) bool {
	l, ok := s.leases[id]
	if !ok || !l.held[slot] {
		return true
	}
	j := l.bucket[slot]
	u, done := id.rule.keys.Release(l.ref, j, s.Now(), force)
	if !done {
		return false
	}
	l.held[slot] = false
	if l.held[0] || l.held[1] {
		s.leases[id] = l
	} else {
		delete(s.leases, id)
	}
	if u > 0 {
		s.correct(id, l.ref, j, -u)
	}
	s.used(id, l.ref, j, l.units[slot]-u)
	return true
}

// releaseOver ends the leases whose bucket is over at now (every lease with
// all: a Flush or Close), so that the units they did not use are pushed back
// this cycle.
func (s *Syncer) releaseOver(now int64, all bool) {
	for id, l := range s.leases {
		k := id.rule.geo.Index(now)
		for slot := range int64(2) {
			if l.held[slot] && (all || l.bucket[slot] < k) {
				s.release(id, slot, all)
			}
		}
	}
}

// holds reports whether id holds a lease of bucket j.
func (s *Syncer) holds(id keyID, j int64) bool {
	l, ok := s.leases[id]
	return ok && l.held[j&1] && l.bucket[j&1] == j
}

// use is what a key granted a lease used of its leases: the most units used
// in one bucket (peak, in bucket peakAt) and the last bucket it used any in.
type use struct {
	ref          handle
	peak, peakAt int64
	last         int64
}

// used notes that id used n units of its lease of bucket j (0 on a grant:
// the key enters the leases ahead). A peak that has left the window gives
// way to the newest use.
func (s *Syncer) used(id keyID, ref handle, j, n int64) {
	u, ok := s.uses[id]
	if !ok {
		u = use{peakAt: j, last: j}
	}
	u.ref = ref
	if n > 0 {
		u.last = max(u.last, j)
		if n >= u.peak || u.peakAt <= j-int64(id.rule.span) {
			u.peak, u.peakAt = n, j
		}
	}
	s.uses[id] = u
}

// peak returns the most units of a lease id used in one bucket of the
// window that ends with bucket k, or 0.
func (s *Syncer) peak(id keyID, k int64) int64 {
	u, ok := s.uses[id]
	if !ok || u.peakAt <= k-int64(id.rule.span) {
		return 0
	}
	return u.peak
}
