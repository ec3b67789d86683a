package window

import "math"

// SplitBucket splits a TokenBucket or GCRA of capacity burst, shared by a
// fleet of instances under an error budget ε = budget (a fraction of burst,
// at least 0), between the store and the instances' leases: the store's
// bucket holds store units, the fleet at most pool in leases. It is pure.
//
// # The model
//
// The store keeps one exact GCRA per key whose capacity is store units, not
// burst. A check an instance cannot admit on its own goes to the store,
// which decides it on that GCRA and may also grant the instance a lease:
// units taken from the store's bucket at once, which the instance then
// admits on its own, with no round trip, until they are spent. An instance
// that counts N̂ live instances holds at most ⌊pool/(N̂+1)⌋ units at any
// time, so that the fleet holds at most pool even with one instance more
// than it counts, and
//
//	store + pool = burst + ⌊ε·burst⌋.
//
// # The bound
//
// Let ℓ(t) be the level of the store's bucket (at most store) and X(t) the
// units the fleet holds (granted and not yet admitted, at most pool), and
// V = ℓ + X. A grant moves units from ℓ to X and a check the store admits
// takes them from ℓ: neither raises V; an admission on a lease lowers X,
// so V falls by what is admitted; only the refill raises V, at rate r =
// 1/T at most. So over any interval (a, b] of length τ the fleet admits at
// most V(a) + r·τ ≤ store + pool + r·τ = burst + ⌊ε·burst⌋ + r·τ: what one
// exact bucket admits, plus the error budget, in real time, whatever the
// traffic, the sync interval or the store's latency. Units granted but
// never spent (an instance that stops, a reply that is lost) only lower V.
//
// # No false denials
//
// A key whose offered load conforms to a bucket of 0.9 of the rate and 0.9
// of burst (at most 0.9·burst + 0.9·r·τ in any interval) is never denied:
// the store is charged what is admitted plus what the fleet holds, at most
// 0.9·burst + 0.9·r·τ + pool in any interval, which fits its bucket while
// pool ≤ store − 0.9·burst. SplitBucket sizes pool so that it does:
// pool = ⌊(⌊burst/10⌋ + ⌊ε·burst⌋)/2⌋.
//
// The price is the capacity: a single cost above store is never admitted,
// and a key drained at once gets store, not burst, before the refill (95.5%
// of burst at ε = 1%); the rate is unchanged.
func SplitBucket(burst int64, budget float64) (store, pool int64) {
	e := int64(0)
	if budget > 0 {
		e = int64(math.Min(math.Floor(budget*float64(burst)), float64(burst)))
	}
	pool = (burst/10 + e) / 2
	return burst + e - pool, pool
}

// Lease returns the most units one of instances live instances holds of a
// key's pool (SplitBucket) at a time, ⌊pool/(instances+1)⌋ (instances at
// least 1): the fleet never holds more than pool, whatever it asks, and an
// instance joining before the count includes it still fits.
func Lease(pool, instances int64) int64 {
	return pool / (max(instances, 1) + 1)
}
