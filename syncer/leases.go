package syncer

// leased is what a key holds of the store's leases: at most one per bucket
// parity, the current bucket's and the next one's (a lease of bucket j in
// slot j&1), as the local state keeps them.
type leased struct {
	ref    Handle
	bucket [2]int64
	held   [2]bool
}

// holdLease records that id holds a lease granted in bucket j, unless its
// slot holds a lease of another bucket that cannot end yet (the checks may
// still admit on it): then it returns false and the caller gives the grant
// back.
func (s *Syncer) holdLease(id keyID, ref Handle, j int64) bool {
	slot := j & 1
	if l, ok := s.leases[id]; ok && l.held[slot] && l.bucket[slot] != j && !s.release(id, slot, false) {
		return false
	}
	l := s.leases[id] // release may have changed it
	l.ref = ref
	l.bucket[slot], l.held[slot] = j, true
	s.leases[id] = l
	s.ahead[id] = ref
	return true
}

// release ends id's lease in the given slot if its bucket is over (or with
// force), and queues the units it did not use as a negative correction of
// its bucket; it reports whether the lease is ended (or there was none).
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
