package syncer

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/window"
)

// waiter states.
const (
	wQueued int32 = iota
	wSent
	wDone
	wAbandoned
)

type waiter struct {
	id    keyID
	ref   handle
	n     int64
	state atomic.Int32
	res   syncport.Answer
	err   error
	done  chan struct{}
}

// reserve asks the store to decide cost n for key of the rule whose table is
// t, and waits for the answer, at most Config.Timeout or until ctx is done.
// ref is the key's local entry (nil if it has none): its pending counts travel
// in the same call and its view is refreshed from the reply. On an error the
// caller decides by its failure mode and counts what it admits locally.
func (s *Syncer) reserve(ctx context.Context, r *windowRule, key string, ref handle, n int64) (syncport.Answer, error) {
	if s.closed.Load() {
		return syncport.Answer{}, syncport.ErrClosed
	}
	if !s.healthy.Load() {
		return syncport.Answer{}, syncport.ErrUnavailable
	}
	if r == nil || r.s != s {
		return syncport.Answer{}, errors.New("syncer: a rule of another syncer")
	}
	w := &waiter{id: keyID{rule: r, key: key}, ref: ref, n: n, done: make(chan struct{})}
	s.mu.Lock()
	s.urgent = append(s.urgent, w)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	timer := time.NewTimer(s.cfg.Timeout)
	defer timer.Stop()
	select {
	case <-w.done:
		return w.res, w.err
	case <-timer.C:
	case <-ctx.Done():
	case <-s.stopped:
	}
	for {
		st := w.state.Load()
		if st == wDone {
			<-w.done
			return w.res, w.err
		}
		if w.state.CompareAndSwap(st, wAbandoned) {
			switch {
			case s.closed.Load():
				return syncport.Answer{}, syncport.ErrClosed
			case ctx.Err() != nil:
				return syncport.Answer{}, ctx.Err()
			}
			s.timedOut()
			return syncport.Answer{}, syncport.ErrTimeout
		}
	}
}

// failWaiters answers every queued (unsent) reservation with err.
func (s *Syncer) failWaiters(err error) {
	s.mu.Lock()
	ws := s.urgent
	s.urgent = nil
	s.mu.Unlock()
	for _, w := range ws {
		s.finish(w, syncport.Answer{}, err)
	}
}

// finish hands a result to a waiter that still waits; it reports whether the
// waiter had given up instead.
func (s *Syncer) finish(w *waiter, res syncport.Answer, err error) (abandoned bool) {
	for {
		st := w.state.Load()
		switch st {
		case wAbandoned:
			return true
		case wDone:
			return false
		}
		w.res, w.err = res, err
		if w.state.CompareAndSwap(st, wDone) {
			close(w.done)
			return false
		}
	}
}

// correct queues a count of n (negative: a reservation the store admitted but
// the caller did not count on) in bucket k of a key, for its next call.
func (s *Syncer) correct(id keyID, ref handle, k, n int64) {
	ks := s.keyState(id, ref)
	ks.corr = append(ks.corr, window.Bucket{Index: k, Count: n})
	s.stats.corrections.Add(1)
}

// keyState is what the syncer remembers of a key between cycles: batches sent
// without a reply, and corrections not yet pushed.
type keyState struct {
	ref     handle
	batches []*batch
	corr    []window.Bucket
}

func (s *Syncer) keyState(id keyID, ref handle) *keyState {
	ks := s.state[id]
	if ks == nil {
		ks = &keyState{ref: ref}
		s.state[id] = ks
	}
	if ks.ref == nil {
		ks.ref = ref
	}
	return ks
}

// askEarly is what a rule's keys call when a key asks for an early sync
// (Keys.OnEarly): serveUrgent takes it with the reservations.
func (s *Syncer) askEarly() {
	s.early.Store(true)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// leasing reports whether a sync of a key of rule r asks for a lease: on
// rules with leases, except in a flush (Flush, Close), which ends every lease
// so that the store counts what was admitted, and must not grant new ones.
func (s *Syncer) leasing(r *windowRule) bool { return r.leases && !s.flushing }

// earlyItems drains the keys that asked for an early sync: each is synced
// at once with a lease request (rules with leases), with no check waiting
// on it. The store down, they are queued for the next full cycle instead.
func (s *Syncer) earlyItems() []item {
	if !s.early.Swap(false) {
		return nil
	}
	var items []item
	for _, r := range s.ruleList() {
		s.refs = r.keys.Early(s.refs[:0])
		for _, ref := range s.refs {
			items = append(items, item{id: keyID{rule: r, key: r.keys.Key(ref)}, ref: ref, lease: s.leasing(r), early: true})
		}
	}
	clear(s.refs)
	if !s.healthy.Load() {
		for _, it := range items {
			it.id.rule.keys.MarkDirty(it.ref)
		}
		return nil
	}
	return items
}

// urgentEvery is how many keys background work (a lease-ahead pass, a
// cycle's per-key calls) sends in one pipeline while checks wait for the
// store (step), before it serves the reservations and early syncs queued
// meanwhile: a check waiting for the store waits behind at most one such
// pipeline, not behind a whole pass. Eight rather than 32: at 100/1m over a
// thousand Zipf keys, the checks within their limit read a p99.9 of
// 2.0–3.1 ms against 2.3–6.4 ms, for a few more round trips a second
// (docs/design-bound.md, "What a check does at the cap").
const urgentEvery = 8

// urgentRecent is how long after a reservation background work keeps to
// pipelines of urgentEvery keys.
const urgentRecent = time.Second

// step returns how many keys background work sends in one pipeline:
// urgentEvery if a check waited for the store within urgentRecent, else
// Config.Batch, so that a fleet whose checks never wait (its keys far from
// their limits, or a cluster, where every key takes the per-key path) pays
// no round trip more for its cycles. Loop only.
func (s *Syncer) step() int {
	if s.localTime().Sub(s.urgentAt) < urgentRecent { // never: the zero time, long ago
		return min(s.cfg.Batch, urgentEvery)
	}
	return s.cfg.Batch
}

// serveUrgent sends every queued reservation, grouped by key, and the
// early syncs keys asked for, in the same pipelines.
func (s *Syncer) serveUrgent() {
	s.mu.Lock()
	ws := s.urgent
	s.urgent = nil
	s.mu.Unlock()
	early := s.earlyItems()
	if len(ws) == 0 && len(early) == 0 {
		return
	}
	if len(ws) > 0 {
		s.stats.urgentCycles.Add(1)
		s.urgentAt = s.localTime()
	}
	if !s.healthy.Load() {
		for _, w := range ws {
			s.finish(w, syncport.Answer{}, syncport.ErrUnavailable)
		}
		return
	}
	index := make(map[keyID]int, len(ws)+len(early))
	items := make([]item, 0, len(ws)+len(early))
	for _, it := range early {
		if _, ok := index[it.id]; !ok {
			index[it.id] = len(items)
			items = append(items, it)
		}
	}
	s.stats.earlySyncs.Add(int64(len(items)))
	for _, w := range ws {
		i, ok := index[w.id]
		if !ok {
			i = len(items)
			index[w.id] = i
			items = append(items, item{id: w.id, ref: w.ref})
		}
		if items[i].ref == nil {
			items[i].ref = w.ref
		}
		items[i].ws = append(items[i].ws, w)
		items[i].lease = s.leasing(w.id.rule)
	}
	start := time.Now()
	var first error
	for i := 0; i < len(items); i += s.cfg.Batch {
		end := min(i+s.cfg.Batch, len(items))
		err := s.syncKeys(s.life, items[i:end])
		first = cmp.Or(first, err)
		if err != nil && !s.healthy.Load() {
			for _, it := range items[end:] {
				for _, w := range it.ws {
					s.finish(w, syncport.Answer{}, syncport.ErrUnavailable)
				}
			}
			break
		}
	}
	if s.cfg.Observer != nil && len(ws) > 0 {
		// Early syncs alone are not urgent: no check waited (they are
		// counted in Stats.EarlySyncs).
		s.cfg.Observer.Urgent(start, time.Since(start), len(ws), len(items), first)
	}
}
