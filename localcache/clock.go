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
// A key admits at most catchUpEvery units on a stale bucket, or, past its
// cap, one cap's worth, before its table's time is fresh again, however long
// the ticker is held back. Cached denials are read against the published
// time: a starved ticker holds them past their retry time, which denies,
// never admits, too much.
const (
	catchUpEvery = 16
	staleAfter   = 2 * time.Millisecond
)

// catchUp publishes the clock's time if the published one is more than
// staleAfter behind it. A table without a clock (its checks pass the time)
// has nothing to catch up.
func (t *Table) catchUp() {
	if t.clock == nil {
		return
	}
	if now := t.clock(); now-t.now.Load() > int64(staleAfter) {
		t.Tick(now)
	}
}
