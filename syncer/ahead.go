package syncer

import "time"

// Leases ahead. A lease lasts one bucket, so without more a busy key would
// start every bucket on its divergence cap alone (2 units at four instances,
// 1 at eight) until the early sync its first admissions ask for brings a
// lease: a key hit harder than that within a round trip has a check wait for
// the store at each bucket's start. So, an eighth of a sub-window before
// each bucket of a rule with leases ends, the syncer syncs every key of the
// rule that used leased units in a bucket of the window (s.uses, noted as its
// leases end), asking for a lease of the next bucket of Keys.NextWant units:
// what the key admitted in the current bucket scaled to a whole one, or the
// most leased units it used in one bucket of the window, never units it only
// held. The store counts the grant in the next bucket at once; the key's
// checks use it from the moment that bucket starts. A key that used no leased
// unit for a window leaves the pass.
//
// What it changes in the bound: nothing — a leased unit is counted in the
// store before it is admitted, in the bucket it is admitted in; the store
// counts the next bucket's grants in every decision (a reservation's in
// place of the oldest bucket's part where they are more) and returns them
// inside the current bucket's total with every pull (syncScript, pulled),
// so no grant made ahead takes the window it will be in past L and every
// view sees it. What it costs: a view counts the grants an eighth of a
// sub-window early (its own up to twice until its next pull), unused units
// count until their bucket ends, and one per-key call per such key and
// bucket (docs/design-bound.md, "Leases ahead").

// aheadLead is how long before the end of a bucket of r its keys are leased
// the next bucket: for a calendar quota, whose periods last a day or more,
// as for a sub-window of calendarLead·8.
func aheadLead(r *windowRule) int64 {
	if r.cal {
		return int64(calendarLead)
	}
	return r.geo.Sub() / 8
}

// calendarLead is the lease-ahead lead of a calendar quota: the lead of a
// one-minute sub-window, long enough for a pass to reach every key.
const calendarLead = time.Minute / 8

// aheadAt returns when (store time) the next lease-ahead pass of r is due
// after bucket r.ahead: a lead before the end of the bucket of now, or of the
// one after it if that bucket's pass has run.
func aheadAt(r *windowRule, now int64) int64 {
	return r.geo.Start(passBucket(r, r.ahead, now)+1) - aheadLead(r)
}

// passBucket returns the bucket a pass of r is next due in, given done, the
// last bucket it ran in: the bucket of now, or the one after it.
func passBucket(r *windowRule, done, now int64) int64 {
	k := r.geo.Index(now)
	if done >= k {
		k++
	}
	return k
}

// leaseAhead runs the lease-ahead pass of every rule whose pass is due: it
// syncs, with a request for a lease of the next bucket, each of the rule's
// keys that used leased units in a bucket of the window and wants one
// (Keys.NextWant), and forgets those that used none. The keys go out as a
// cycle's per-key calls do (perKeyAmid), serving the reservations queued
// meanwhile.
func (s *Syncer) leaseAhead() {
	now := s.Now()
	due := make(map[*windowRule]int64)
	live := make(map[*windowRule]bool)
	for _, r := range s.ruleList() {
		live[r] = true
		if r.leases && now >= aheadAt(r, now) {
			k := r.geo.Index(now)
			r.ahead = k
			due[r] = k
		}
	}
	if len(due) == 0 || !s.healthy.Load() {
		return // a store that is down grants nothing; try at the next bucket
	}
	var items []item
	for id, u := range s.uses {
		k, ok := due[id.rule]
		if !ok {
			if !live[id.rule] {
				delete(s.uses, id) // a rule retired
			}
			continue
		}
		span := int64(id.rule.span)
		if u.last <= k-span && !s.holds(id, k) {
			delete(s.uses, id) // no leased unit used in the window
			continue
		}
		if s.holds(id, k+1) {
			continue // leased ahead already
		}
		if want := id.rule.keys.NextWant(u.ref, now, s.peak(id, k)); want > 0 {
			items = append(items, item{id: id, ref: u.ref, lease: true, next: true, want: want, early: true})
		}
	}
	s.stats.earlySyncs.Add(int64(len(items)))
	s.sendPass(items) // they ask for leases: the per-key path
}
