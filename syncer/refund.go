package syncer

// refund is a store admission taken back: n units of bucket j of a key.
type refund struct {
	id  keyID
	ref handle
	j   int64
	n   int64
}

// Refund takes back cost n that the store admitted for key at store time at
// (syncport.Answer.At): it is pushed as a negative correction of the bucket of at
// with the key's next sync. h is the key's local entry, or nil. It never
// blocks on the store. Limiter.AllowAll uses it when a later check of the
// same request is denied.
func (r *windowRule) Refund(key string, h handle, at, n int64) {
	if n < 1 || r.s.closed.Load() {
		return
	}
	s := r.s
	s.mu.Lock()
	s.refunds = append(s.refunds, refund{id: keyID{rule: r, key: key}, ref: h, j: r.geo.Index(at), n: n})
	s.mu.Unlock()
}

// takeRefunds turns the refunds queued since the last cycle into
// corrections.
func (s *Syncer) takeRefunds() {
	s.mu.Lock()
	rs := s.refunds
	s.refunds = nil
	s.mu.Unlock()
	for _, f := range rs {
		s.correct(f.id, f.ref, f.j, -f.n)
	}
}
