package syncer

import "time"

// Returns of unused leased units. A lease ends once its bucket is over, and
// the units it did not use go back to the store as a negative correction.
// Until they do, the store counts them as admitted, in every decision and
// every pull, so they take room from the other instances. A cycle ends the
// leases whose bucket is over, but cycles come once a SyncInterval: at an
// interval as long as the window, a burst's unused units stayed counted for
// up to a window, and keys offered below 0.9·L were denied (the load test's
// sync-burst profile at -sync 1s, in every run). So, for a rule with leases
// whose sub-window is shorter than the sync interval, right after each of
// its buckets ends the loop also ends those leases and pushes what they give
// back, on the per-key path, as the lease-ahead pass sends its keys. A key
// that needs no sync keeps its returns for a later cycle, as a cycle lets it
// (deferCorrections). At the default interval, one sub-window of the default
// precision for a one-second rule, the cycles come as often: no pass.
//
// What it changes in the bound: nothing — it only sends earlier the
// corrections a cycle would send (Table.Release decides what a lease gives
// back, and when it may end).

// returnLag is how long after the end of a bucket of r its leases are
// ended: long enough for the limiter's ticker, every millisecond, to have
// published a time in the next bucket (Table.Release waits for it).
func returnLag(r *windowRule) int64 { return max(r.geo.Sub()/16, int64(2*time.Millisecond)) }

// returns reports whether r takes return passes: it takes leases, and the
// cycles come less often than its buckets end.
func (s *Syncer) returns(r *windowRule) bool {
	return r.leases && time.Duration(r.geo.Sub()) < s.cfg.Interval
}

// returnAt returns when (store time) the next return pass of r is due
// after bucket r.returned: a lag after the start of the bucket of now, or of
// the one after it if that bucket's pass has run.
func returnAt(r *windowRule, now int64) int64 {
	return r.geo.Start(passBucket(r, r.returned, now)) + returnLag(r)
}

// passWait returns how long the loop may wait before the next lease-ahead
// or return pass is due, or a minute if no rule takes leases.
func (s *Syncer) passWait() time.Duration {
	now := s.Now()
	wait := time.Minute
	for _, r := range s.ruleList() {
		if r.leases {
			wait = min(wait, time.Duration(max(aheadAt(r, now)-now, 0)))
		}
		if s.returns(r) {
			wait = min(wait, time.Duration(max(returnAt(r, now)-now, 0)))
		}
	}
	return wait
}

// returnPass, once a bucket of a rule that takes return passes has ended,
// ends the leases whose bucket is over and pushes the units they did not
// use, with whatever else the keys concerned hold for the store, but for
// the keys that may leave them for a later cycle.
func (s *Syncer) returnPass() {
	now := s.Now()
	due := false
	for _, r := range s.ruleList() {
		if s.returns(r) && now >= returnAt(r, now) {
			r.returned = r.geo.Index(now)
			due = true
		}
	}
	if !due || !s.healthy.Load() {
		return // a store that is down counts nothing back: the next cycle sends it
	}
	s.releaseOver(now, false)
	var items []item
	for id, ks := range s.state {
		if s.returns(id.rule) && len(ks.corr) > 0 && !s.deferCorrections(id, ks, now) {
			items = append(items, item{id: id, ref: ks.ref})
		}
	}
	if len(items) > 0 {
		s.sendPass(items)
	}
}
