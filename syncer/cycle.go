package syncer

import (
	"cmp"
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/syncport"
)

// cycle is one full sync: heartbeat, then every dirty key and every key with
// something outstanding, in pipelines, serving urgent reservations between
// them.
func (s *Syncer) cycle() error {
	start := time.Now()
	s.stats.cycles.Add(1)
	ctx := s.life
	// Back from an outage (or a store never reached), the instance
	// heartbeats only once this cycle has pushed what it admitted
	// meanwhile: an instance that sees the store again first stays on its
	// share until every instance has heartbeated since, then two sync
	// intervals more (the engine's recovery grace), and a heartbeat sent
	// before the pushes would let it go on before they land, however long
	// this cycle takes. Until then it only looks at the registry. The
	// cycle back syncs every key with counts pending, as a flush does: a
	// key far from its limit would otherwise stay parked (Keys.Need) with
	// what it admitted in the outage.
	if !s.healthy.Load() {
		s.back = true
	}
	back := s.back
	reg := s.heartbeat
	if back {
		reg = s.look
		flushing := s.flushing
		s.flushing = true
		defer func() { s.flushing = flushing }()
	}
	// A store that refused writes stays down for the checks until cycles in
	// a row have had their writes accepted (health.go): the look above is a
	// read, which such a store answers.
	mark := s.refusals.Load()
	if err := reg(ctx); err != nil {
		s.down(err)
		return err
	}
	// After a loss of the store's data, the instance restores what it saw
	// before anything else, then joins the new registry (rebuild.go): its
	// heartbeat above, in another epoch, only looked.
	if s.lost != "" {
		if err := s.restore(ctx); err != nil {
			s.down(err)
			return err
		}
		if !back {
			if err := s.heartbeat(ctx); err != nil {
				s.down(err)
				return err
			}
		}
	}
	if !s.refusing.Load() {
		s.setHealth(true, nil)
	}
	// A bulk call left unanswered by an earlier cycle goes first: nothing
	// else is pushed before the store has it.
	if err := s.resendBulk(ctx); err != nil {
		return err
	}
	s.pruneRecs()
	beat := time.Now()
	// Collecting a key flood's keys can itself outlast the registry entry
	// (half a second for 230k keys under -race): it heartbeats on the way
	// too. A failed heartbeat there is left to the first batch's, which
	// handles it.
	items := s.collect(func() {
		if time.Since(beat) >= s.beatEvery() && reg(ctx) == nil {
			beat = time.Now()
		}
	})
	s.cycleKeys = len(items)
	var err error
	// On the bulk path the pipelines overlap: batches take turns on
	// bulkLanes lanes, each with its own marker, so while the store runs one
	// lane's call the loop settles another's reply and builds the next
	// call. A lane sends a call only once its previous one has its reply
	// (see bulkScript: a lane's calls must run in order).
	var fly [bulkLanes]*bulkCall
	// landAll waits for and settles every call in flight, oldest first. It
	// returns the first send error (that call and any after it are queued
	// for a resend).
	landAll := func() error {
		var first error
		for {
			c := oldest(fly[:])
			if c == nil {
				return first
			}
			fly[c.lane] = nil
			if err := s.landBulk(c); err != nil {
				first = cmp.Or(first, err)
			} else {
				_ = s.settleBulk(c) // a reply it cannot read: queued for a resend
			}
		}
	}
	for b, i := 0, 0; i < len(items); b, i = b+1, i+s.cfg.Batch {
		end := min(i+s.cfg.Batch, len(items))
		// A cycle that outlasts the heartbeat period (a key flood, a slow
		// store) heartbeats on the way: else the instance's registry entry
		// expires mid-cycle, the others undercount N̂ and widen their caps.
		beatDue := time.Since(beat) >= s.beatEvery()
		if beatDue || s.hasUrgent() {
			// Reservations may concern keys of the calls in flight: let
			// them land first, and send nothing else meanwhile.
			if lerr := landAll(); lerr != nil {
				err = cmp.Or(err, lerr)
				s.requeue(items[i:]) // nothing of this batch was sent
				break
			}
			s.serveUrgent()
			if beatDue {
				if herr := reg(ctx); herr != nil {
					err = cmp.Or(err, herr)
					s.down(herr)
					s.requeue(items[i:])
					break
				}
				beat = time.Now()
			}
		}
		// Split and built after the reservations and early syncs are
		// served: they push their keys' pending counts, which must not
		// travel twice, and a key whose call lost its reply must leave the
		// bulk path until the call is answered (bulkable).
		simple, rest := s.split(items[i:end])
		var next *bulkCall
		if len(simple) > 0 {
			next = s.newBulk(simple, s.Now())
			next.lane = b % bulkLanes
		}
		var landed *bulkCall
		if next != nil && fly[next.lane] != nil {
			landed, fly[next.lane] = fly[next.lane], nil
			if lerr := s.landBulk(landed); lerr != nil {
				err = cmp.Or(err, lerr)
				s.requeue(items[i:])
				break
			}
		}
		if next != nil {
			s.startBulk(ctx, next)
			fly[next.lane] = next
		}
		if landed != nil {
			// A reply it cannot read leaves the call queued for a resend,
			// which the store recognises as run; the cycle goes on.
			_ = s.settleBulk(landed)
		}
		done, perr := s.perKeyAmid(ctx, rest, landAll)
		err = cmp.Or(err, perr)
		if !done || s.lost != "" {
			// The store failed, or a reply said it lost its data: the
			// next cycle comes back to it (restoring first).
			s.requeue(items[end:])
			break
		}
	}
	if lerr := landAll(); lerr != nil {
		err = cmp.Or(err, lerr)
	}
	if back && (s.healthy.Load() || s.refusing.Load() && s.refusals.Load() == mark) {
		if herr := s.heartbeat(ctx); herr != nil {
			err = cmp.Or(err, herr)
			s.down(herr)
			s.goodCycles = 0
		} else if !s.refusing.Load() {
			s.back = false
		} else if s.accepted(mark) {
			s.back = false
			s.setHealth(true, nil)
		}
	} else {
		s.goodCycles = 0
	}
	s.serveUrgent()
	s.stats.lastCycle.Store(int64(time.Since(start)))
	s.stats.lastCycleKeys.Store(int64(len(items)))
	return err
}

// pruneRecs forgets the reservation records that the store has expired
// with their keys: a key that went idle after a reservation is never pushed
// on the bulk path again, and recs must not grow with every such key.
func (s *Syncer) pruneRecs() {
	if len(s.recs) == 0 {
		return
	}
	now := s.localNow()
	for id, at := range s.recs {
		if now-at > id.rule.ttlMs*int64(time.Millisecond) {
			delete(s.recs, id)
		}
	}
}

// beatEvery is how often a long cycle heartbeats: every Interval, and at
// least three times per InstanceTTL.
func (s *Syncer) beatEvery() time.Duration {
	return min(s.cfg.Interval, s.cfg.InstanceTTL/3)
}

// aliveEvery is how many keys collect handles between two looks at whether
// a heartbeat is due.
const aliveEvery = 4096

// item is one key to sync, with the reservations waiting on it.
type item struct {
	id    keyID
	ref   handle // nil: no local state to push or settle
	ws    []*waiter
	lease bool // ask the store for a lease (a key at its cap: rules with leases only)
	// next asks for the lease in the bucket after the store's current one,
	// want units of it (ahead.go); else Keys.Want sizes it at the call.
	next bool
	want int64
	// early is an early sync (serveUrgent): it takes the per-key path, whose
	// unanswered calls keep the key off the bulk path until answered.
	early bool
}

// collect drains every table's dirty keys and adds the keys with something
// outstanding and, for one more cycle, the keys pushed in the last one: that
// follow-up pull brings back what the other instances pushed in the same
// cycle, so after one sync without traffic every instance sees the same
// totals. It calls alive every aliveEvery keys, to heartbeat if due.
func (s *Syncer) collect(alive func()) []item {
	s.releaseOver(s.Now(), false) // their returns are corrections: collected below
	s.takeRefunds()               // so are refunds
	var items []item
	seen := make(map[keyID]bool, len(s.state)+len(s.prev))
	now := s.Now()
	for id, ks := range s.state {
		if s.deferCorrections(id, ks, now) {
			continue
		}
		seen[id] = true
		items = append(items, item{id: id, ref: ks.ref})
	}
	for _, r := range s.drainList() {
		s.refs = r.keys.Drain(s.refs[:0])
		if r.leases && s.flushing {
			// The keys earlier cycles left with their counts pending.
			s.refs = r.keys.Unsynced(s.refs, now)
		}
		for i, ref := range s.refs {
			if i%aliveEvery == aliveEvery-1 {
				alive()
			}
			id := keyID{rule: r, key: r.keys.Key(ref)}
			if seen[id] {
				continue
			}
			// Need-driven sync: a parked key keeps its counts pending until
			// an admission takes it near its cap or its limit, or a flush.
			if s.parked(r, ref, now) {
				s.stats.deferred.Add(1)
				continue
			}
			seen[id] = true
			items = append(items, item{id: id, ref: ref})
		}
	}
	clear(s.refs)
	for i, it := range s.prev {
		if i%aliveEvery == aliveEvery-1 {
			alive()
		}
		if seen[it.id] {
			continue
		}
		// The follow-up pull matters only near the limit (Keys.Need; the
		// push left nothing unacknowledged).
		if s.parked(it.id.rule, it.ref, now) {
			continue
		}
		items = append(items, item{id: it.id, ref: it.ref})
	}
	s.prev = s.prev[:0]
	return items
}

// parked reports whether a key of rule r (ref) is left out of the cycle
// under way: a key of an Eventual rule (one with leases) that does not need
// a sync now (Keys.Need), unless the cycle is a flush, which takes every
// key.
func (s *Syncer) parked(r *windowRule, ref handle, now int64) bool {
	if !r.leases || s.flushing || r.keys.Need(ref, now) {
		return false
	}
	r.keys.Park(ref)
	return true
}

// deferCorrections reports whether a key whose state holds only
// corrections (the unused units of an ended lease, refunds) can leave them
// for a later cycle: an Eventual key that does not need a sync (Keys.Need).
// The store counts those units until then, which only makes the key look
// fuller than it is, and only while they are in the window: corrections of
// buckets that have left it are dropped, as the store drops the buckets.
func (s *Syncer) deferCorrections(id keyID, ks *keyState, now int64) bool {
	r := id.rule
	if len(ks.batches) > 0 || ks.ref == nil || !s.parked(r, ks.ref, now) {
		return false
	}
	k := r.geo.Index(now)
	live := ks.corr[:0]
	for _, c := range ks.corr {
		if k-c.Index < int64(r.span) {
			live = append(live, c)
		}
	}
	clear(ks.corr[len(live):])
	ks.corr = live
	if len(ks.corr) == 0 {
		delete(s.state, id)
	}
	s.stats.deferred.Add(1)
	return true
}

// requeue hands back items that were not sent: keys are marked dirty again
// and waiters answered syncport.ErrUnavailable (they decide by their failure mode).
func (s *Syncer) requeue(items []item) {
	for _, it := range items {
		if it.ref != nil {
			it.id.rule.keys.MarkDirty(it.ref)
		}
		for _, w := range it.ws {
			s.finish(w, syncport.Answer{}, syncport.ErrUnavailable)
		}
	}
}

// syncKeys syncs items and waits for the answers: first any unanswered bulk
// call, then the bulk-path items in one bulk call, then the others in one
// pipeline of per-key calls. It returns the first store error; items not
// sent are queued again.
func (s *Syncer) syncKeys(ctx context.Context, items []item) error {
	// A loss seen since the last cycle: restore first, rather than send
	// calls the store will refuse (and their checks to the failure mode).
	if err := s.restore(ctx); err != nil {
		s.requeue(items)
		return err
	}
	if err := s.resendBulk(ctx); err != nil {
		s.requeue(items)
		return err
	}
	simple, rest := s.split(items)
	if err := s.syncBulk(ctx, simple); err != nil {
		s.requeue(rest)
		return err
	}
	return s.syncPerKey(ctx, rest)
}

// sendPass sends the keys of a background pass (leases ahead, returns) on
// the per-key path, serving the reservations queued meanwhile (perKeyAmid);
// as in syncKeys, an unanswered bulk call goes first. Nothing of the pass is
// in flight between its pipelines.
func (s *Syncer) sendPass(items []item) {
	if err := s.restore(s.life); err != nil {
		s.requeue(items)
		return
	}
	if err := s.resendBulk(s.life); err != nil {
		s.requeue(items)
		return
	}
	_, _ = s.perKeyAmid(s.life, items, nil)
}

// perKeyAmid syncs items of the per-key path (a cycle's, a lease-ahead
// pass's), step keys to a pipeline, and between two pipelines serves the
// reservations and early syncs queued meanwhile, once land (nil: nothing
// in flight) has landed the bulk calls in flight (they may hold the same
// keys). It returns the first error, and done false if the caller must
// stop: the store failed, and the items not sent are queued again. An
// error Redis answered for some keys (their batches are kept) does not
// stop it.
func (s *Syncer) perKeyAmid(ctx context.Context, items []item, land func() error) (done bool, err error) {
	for len(items) > 0 {
		n := min(len(items), s.step())
		perr := s.syncPerKey(ctx, items[:n])
		items = items[n:]
		err = cmp.Or(err, perr)
		if perr != nil && !s.healthy.Load() {
			s.requeue(items)
			return false, err
		}
		if len(items) == 0 || !s.hasUrgent() {
			continue
		}
		if land != nil {
			if lerr := land(); lerr != nil {
				s.requeue(items)
				return false, cmp.Or(err, lerr)
			}
		}
		if s.serveUrgent(); !s.healthy.Load() {
			s.requeue(items) // the store failed them: the rest would fail too
			return false, err
		}
	}
	return true, err
}

// split separates the items that take the bulk path from the others.
func (s *Syncer) split(items []item) (simple, rest []item) {
	if !s.bulk {
		return nil, items
	}
	for _, it := range items {
		if s.bulkable(it) {
			simple = append(simple, it)
		} else {
			rest = append(rest, it)
		}
	}
	return simple, rest
}

// hasUrgent reports whether reservations or early syncs wait to be sent.
func (s *Syncer) hasUrgent() bool {
	if s.early.Load() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.urgent) > 0
}
