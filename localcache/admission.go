package localcache

import "hash/maphash"

// The admission rule: which key not yet tracked gets an entry of its own.
//
// While fewer than half of Keys.max keys are tracked, every key is admitted
// at its first check, and nothing else happens: no hash, no sketch. Past
// that high-water mark a key must earn its place, as in W-TinyLFU's
// doorkeeper: each check of an untracked key counts a sighting in a
// frequency sketch (sketch.go) shared by the tables of a Keys (the Tables
// and the KeyTables alike), and the key is admitted once its estimate
// reaches a threshold that rises as the cache fills, in eighths of Max:
//
//	tracked keys    < 1/2   < 5/8   < 3/4   < 7/8   < 1     = Max
//	sightings          1       2       4       8      15     none
//
// Why: a flood of keys that are each used once (random IPv6 addresses, API
// keys) fills the first half, as any new traffic would, but past it a
// one-hit key is admitted only if its four counters all collide with other
// keys' sightings since the last halving. The sketch halves every Width/2
// sightings, so a counter holds on average at most one sighting of others,
// and the chance that all four hold one is 2.4% at the end of a period and
// about 0.6% on average over one: the flood's keys can take places in the
// 1/2–5/8 band and practically none beyond it (four counters each holding
// three sightings of others: below 10⁻⁷), so the last 3/8 of the cache stays for keys
// in real use, which are seen again and again. A key that is not admitted
// is still decided, with no shared state (untracked.go for a Table,
// keyuntracked.go for a KeyTable): its checks only take the slower path. The thresholds double per band so that a key used a
// few times a minute gets in while a flood keeps its keys out; 15 is the
// most a 4-bit counter holds. Sightings are per table (each table hashes
// with its own seed): a request checked under two rules is not two
// sightings of one key.
//
// Sizes: the sketch has 4 rows of Width counters, Width = Max rounded up to
// a power of two, at least 1024 and at most 2^22: 2·Width bytes (2 KiB for
// Max ≤ 1024, 2 MiB for the default 1,000,000, at most 8 MiB), allocated
// when the cache first passes its high-water mark.

// Doorkeeper sizes.
const (
	minDoorWidth = 1 << 10
	maxDoorWidth = 1 << 22
)

// doorWidth returns the sketch's counters per row for a bound of bound keys.
func doorWidth(bound int64) int { return pow2Within(bound, minDoorWidth, maxDoorWidth) }

// threshold returns how many sightings admit a key while n of bound keys
// are tracked (n at least half of bound, below it): 2, 4, 8, then 15 per
// eighth.
func threshold(n, bound int64) int {
	band := min(max0(8*n/bound-4), 3) // 0: [1/2, 5/8), …, 3: [7/8, 1)
	return min(2<<band, counterMax)
}

// doorkeeper returns k's frequency sketch, allocating it on first use.
func (k *Keys) doorkeeper() *freqSketch {
	if d := k.door.Load(); d != nil {
		return d
	}
	w := doorWidth(k.max)
	k.door.CompareAndSwap(nil, newFreqSketch(w, int64(w/2)))
	return k.door.Load()
}

// admits reports whether key, which a table under k does not track, may
// have an entry now; seed is the table's own hash seed (sightings are per
// table). With sight, this check counts as a sighting of key first;
// without, only the sightings so far count (a check that already counted
// one). At the bound it refuses and asks for an early sweep (Keys.Usage: Full).
// Every table under k takes its keys in through here: a Table (keys.go)
// and the KeyTables' key index (keyed.go).
func (k *Keys) admits(seed maphash.Seed, key string, sight bool) bool {
	n := k.n.Load()
	if 2*n < k.max {
		return true
	}
	if n >= k.max {
		k.full.Store(true)
		return false
	}
	d := k.doorkeeper()
	h := maphash.String(seed, key)
	var f int
	if sight {
		f = d.add(h)
	} else {
		f = d.estimate(h)
	}
	return f >= threshold(n, k.max)
}
