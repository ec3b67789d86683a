package localcache

// Refunds. Limiter.AllowAll counts a request against several rules one
// after the other; when a later rule denies it, the earlier admissions are
// taken back here, so that a denial consumes nothing. A refund only ever
// lowers a count by units that were counted and not admitted in the end:
// every count stays at least what was really admitted, so no bound on
// admissions depends on it.

// Refund takes back up to n units that AllowAt or AllowDegraded admitted for
// key at now, from the key's pending count in the bucket of now, and returns
// how many it took back, and whether the rest is in the store: tracked is
// true when the key's entry holds the bucket, so that units no longer
// pending left pend only as the store counted them (acknowledged by a
// Settle, or covered by a lease that Release ended); the caller takes them
// back there (an Eventual rule's store correction). tracked is false when
// the entry is gone or the bucket has left the ring, or for a key the table
// does not track (its units are in the sketch of untracked keys): the
// units stay counted, conservatively.
//
// In an Eventual table the syncer may also have read the pending count
// before the refund and push it whole: Settle then lowers the count by no
// more than it holds and returns the difference, which the syncer pushes
// back as a negative correction (until then the store over-counts, never
// under).
func (t *Table) Refund(key string, now, n int64) (taken int64, tracked bool) {
	e := t.m.Load(key)
	if e == nil || n < 1 {
		return 0, false
	}
	j := t.geo.Index(now)
	pw := t.pend(e, t.slotOf(j))
	for {
		w := pw.Load()
		if tagOf(w) != j&tagMask {
			return 0, false
		}
		c := min(countOf(w), n)
		if c == 0 || pw.CompareAndSwap(w, w-uint64(c)) {
			return c, true
		}
	}
}

// Refund takes back cost n that Allow admitted for key: the key's TAT moves
// back by n intervals. If the admission found the bucket fuller than its
// TAT said (the TAT was in the past), the key ends up with less than it had
// before: conservative. A key that is gone, or that was decided on the
// sketch of untracked keys (whose cells only ever rise), keeps the cost.
func (t *GCRATable) Refund(key string, n int64) {
	e, ok := t.keys.m.Load(key)
	if !ok || n < 1 {
		return
	}
	for {
		tat := e.tat.Load()
		if tat <= tatFresh { // gone, not seeded, or never admitted to
			return
		}
		if e.tat.CompareAndSwap(tat, tat-n*t.g.Interval()) {
			return
		}
	}
}

// Refund takes back up to n units that Allow admitted for key at now: the
// newest timestamps of the log, if they are at now (a later admission at a
// later time is not removed in their place), and returns how many.
func (t *LogTable) Refund(key string, now, n int64) int64 {
	e, ok := t.keys.m.Load(key)
	if !ok || n < 1 {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var c int64
	for c < n && e.size > 0 && e.state == logLive && e.at(e.size-1) == now {
		e.size--
		c++
	}
	if c > 0 {
		e.full.until.Store(0) // there is room again
		if e.size > 0 {
			e.last = e.at(e.size - 1) // the newest unit left, for reset
		}
	}
	return c
}
