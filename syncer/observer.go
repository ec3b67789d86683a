package syncer

import "time"

// failed counts a failed round trip and tells the observer. It returns err
// classified (health.go): an error by which the store refuses writes or
// this client also puts the store in the refusal state.
func (s *Syncer) failed(err error) error {
	err = s.classify(err)
	s.stats.failures.Add(1)
	if s.cfg.Observer != nil {
		s.cfg.Observer.StoreError(err)
	}
	if refused(err) {
		s.refuse(err)
	}
	return err
}

// observedCycle runs a full cycle and reports it.
func (s *Syncer) observedCycle() error {
	if s.cfg.Observer == nil {
		return s.cycle()
	}
	start := time.Now()
	s.cycleKeys = 0
	err := s.cycle()
	s.cfg.Observer.Cycle(start, time.Since(start), s.cycleKeys, err)
	return err
}

// pulledTotals reports a key pulled at now (store time) whose window
// totals, from bucket first on, put it above r's limit.
func (s *Syncer) pulledTotals(r *windowRule, now, first int64, totals []int64) {
	if s.cfg.Observer == nil || len(totals) == 0 {
		return
	}
	var sum int64
	for _, n := range totals {
		sum += n
	}
	limit := r.limit.Load()
	if sum <= limit { // the estimate never exceeds the sum of the buckets
		return
	}
	est := r.geo.Parts(now, func(j int64) int64 {
		if i := j - first; i >= 0 && i < int64(len(totals)) {
			return totals[i]
		}
		return 0
	}).Value()
	if lim := float64(limit); est > lim {
		s.cfg.Observer.OverLimit(r.name, (est-lim)/lim)
	}
}
