package localcache

import "time"

// The published time. A check on the fast path reads the time a background
// ticker publishes every millisecond (Tick) instead of the clock, which costs
// more than the rest of the check. A process starved of CPU (more busy
// goroutines than cores) can hold that ticker back by tens of milliseconds,
// and a check on a stale time counts its admission in a bucket that, in real
// time, has ended: the count leaves the window a bucket early, and with it
// the room it held — up to a whole lease of units. So the checks keep the
// time fresh themselves: the check that takes a key's count in a bucket to a
// multiple of catchUpEvery, and every check the slow path does not admit (it
// goes to the store at the cap, or is denied and computes its retry time),
// reads the clock (Config.Now: about 26 ns here, so about 2 ns an admission)
// and, if the published time is more than staleAfter behind it, publishes it.
// And a store's answer from a later bucket than the published time publishes
// its own (publish): the answer refreshes the key's cap, which would
// otherwise be spent again on the stale bucket, one cap per round trip. A
// key admits at most catchUpEvery units on a stale bucket, or, past its cap,
// one cap's worth, before its table's time is fresh again, however long the
// ticker is held back.
//
// Cached denials are read against the published time too, and a starved
// ticker would hold them past their retry time: it denies, never admits,
// too much, but a flat-out fleet on a starved process admitted 55–85 % of
// what the algorithm alone admits (throughput profile of the load test). So
// once a catch-up has found the published time stale, the table is late for
// lateFor: until then each cached denial reads the clock first (catchUp).
// A process whose ticker keeps time pays nothing for it.
const (
	catchUpEvery = 16
	staleAfter   = 2 * time.Millisecond
	lateFor      = time.Second
)

// catchUp publishes the clock's time if the published one is more than
// staleAfter behind it, and then marks the table late for lateFor. A table
// without a clock (its checks pass the time) has nothing to catch up.
func (t *Table) catchUp() {
	if t.clock == nil {
		return
	}
	if now := t.clock(); now-t.now.Load() > int64(staleAfter) {
		t.tick(now)
		t.lateUntil.Store(now + int64(lateFor))
	}
}

// deniedUntil returns how long a cached denial in room word rw still holds:
// against the published time, caught up first while the table is late.
func (t *Table) deniedUntil(rw uint64) time.Duration {
	if t.now.Load() < t.lateUntil.Load() {
		t.catchUp()
	}
	return cachedDenial(rw, t.nowUs.Load())
}

// publish publishes now, the time of a store's answer (Settle), if the
// published time is in an earlier bucket. An answer refreshes the key's cap:
// on a published time held back by less than staleAfter (a starved ticker),
// each answer would let the key admit one more cap's worth in a bucket the
// store has left, while the store decides the next bucket without them; the
// first answer after the store's bucket changed now dates the checks that
// follow in the new bucket. Tick keeps the later of the two times.
func (t *Table) publish(now int64) {
	if t.geo.Index(now) > t.geo.Index(t.now.Load()) {
		t.tick(now)
	}
}
