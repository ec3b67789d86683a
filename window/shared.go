package window

import "math"

// SharedBucket splits a TokenBucket or GCRA of capacity Burst, shared by a
// fleet of instances under an error budget ε, between the store and the
// instances' leases. It is a small value; its methods are pure.
//
// # The model
//
// The store keeps one exact GCRA per key whose capacity is Store units, not
// Burst. A check an instance cannot admit on its own goes to the store,
// which decides it on that GCRA and may also grant the instance a lease:
// units taken from the store's bucket at once, which the instance then
// admits on its own, with no round trip, until they are spent. An instance
// holds at most Lease(N̂) units at any time, so the fleet holds at most
// Pool, and
//
//	Store + Pool = Burst + ⌊ε·Burst⌋.
//
// # The bound
//
// Let ℓ(t) be the level of the store's bucket (at most Store) and X(t) the
// units the fleet holds (granted and not yet admitted, at most Pool), and
// V = ℓ + X. A grant moves units from ℓ to X and a check the store admits
// takes them from ℓ: neither raises V; an admission on a lease lowers X,
// so V falls by what is admitted; only the refill raises V, at rate r =
// 1/T at most. So over any interval (a, b] of length τ the fleet admits at
// most V(a) + r·τ ≤ Store + Pool + r·τ = Burst + ⌊ε·Burst⌋ + r·τ: what one
// exact bucket admits, plus the error budget, in real time, whatever the
// traffic, the sync interval or the store's latency. Units granted but
// never spent (an instance that stops, a reply that is lost) only lower V.
//
// # No false denials
//
// A key whose offered load conforms to a bucket of 0.9 of the rate and 0.9
// of Burst (at most 0.9·Burst + 0.9·r·τ in any interval) is never denied:
// the store is charged what is admitted plus what the fleet holds, at most
// 0.9·Burst + 0.9·r·τ + Pool in any interval, which fits its bucket while
// Pool ≤ Store − 0.9·Burst. NewSharedBucket sizes Pool so that it does:
// Pool = ⌊(⌊Burst/10⌋ + ⌊ε·Burst⌋)/2⌋.
//
// The price is the capacity: a single cost above Store is never admitted,
// and a key drained at once gets Store, not Burst, before the refill (95.5%
// of Burst at ε = 1%); the rate is unchanged.
type SharedBucket struct {
	// Store is the capacity of the store's bucket, in units.
	Store int64
	// Pool is the most units the fleet holds in leases.
	Pool int64
}

// NewSharedBucket returns the split of a bucket of capacity burst under the
// error budget budget (a fraction of burst, at least 0).
func NewSharedBucket(burst int64, budget float64) SharedBucket {
	e := int64(0)
	if budget > 0 {
		e = int64(math.Min(math.Floor(budget*float64(burst)), float64(burst)))
	}
	pool := (burst/10 + e) / 2
	return SharedBucket{Store: burst + e - pool, Pool: pool}
}

// Lease returns the most units one instance may hold when instances are
// live: ⌊Pool/(instances+1)⌋, so that the fleet holds at most Pool even with
// one instance more than it counts.
func (s SharedBucket) Lease(instances int64) int64 {
	return s.Pool / (max(instances, 0) + 1)
}
