package window

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// guava is a direct transcription of Guava's SmoothRateLimiter with its
// SmoothWarmingUp subclass, field for field and step for step, in µs: the
// reference WarmUp is measured against.
type guava struct {
	storedPermits        float64
	maxPermits           float64
	stableIntervalMicros float64
	nextFreeTicketMicros int64
	warmupPeriodMicros   int64
	slope                float64
	thresholdPermits     float64
	coldFactor           float64
}

// newGuava is RateLimiter.create(permitsPerSecond, warmupPeriod) with the
// stopwatch at nowMicros: setRate on a new limiter (maxPermits 0, so it
// starts cold).
func newGuava(window, warmup time.Duration, limit int64, nowMicros int64) *guava {
	g := &guava{warmupPeriodMicros: int64(warmup / time.Microsecond), coldFactor: 3, nextFreeTicketMicros: nowMicros}
	g.resync(nowMicros)
	g.stableIntervalMicros = float64(window) / 1e3 / float64(limit)
	g.doSetRate(g.stableIntervalMicros)
	return g
}

func (g *guava) doSetRate(stableIntervalMicros float64) {
	oldMaxPermits := g.maxPermits
	coldIntervalMicros := stableIntervalMicros * g.coldFactor
	g.thresholdPermits = 0.5 * float64(g.warmupPeriodMicros) / stableIntervalMicros
	g.maxPermits = g.thresholdPermits + 2.0*float64(g.warmupPeriodMicros)/(stableIntervalMicros+coldIntervalMicros)
	g.slope = (coldIntervalMicros - stableIntervalMicros) / (g.maxPermits - g.thresholdPermits)
	if oldMaxPermits == 0 {
		g.storedPermits = g.maxPermits // initial state is cold
	} else {
		g.storedPermits = g.storedPermits * g.maxPermits / oldMaxPermits
	}
}

func (g *guava) storedPermitsToWaitTime(storedPermits, permitsToTake float64) int64 {
	availablePermitsAboveThreshold := storedPermits - g.thresholdPermits
	var micros int64
	if availablePermitsAboveThreshold > 0 {
		permitsAboveThresholdToTake := math.Min(availablePermitsAboveThreshold, permitsToTake)
		length := g.permitsToTime(availablePermitsAboveThreshold) + g.permitsToTime(availablePermitsAboveThreshold-permitsAboveThresholdToTake)
		micros = int64(permitsAboveThresholdToTake * length / 2.0)
		permitsToTake -= permitsAboveThresholdToTake
	}
	micros += int64(g.stableIntervalMicros * permitsToTake)
	return micros
}

func (g *guava) permitsToTime(permits float64) float64 {
	return g.stableIntervalMicros + permits*g.slope
}

func (g *guava) coolDownIntervalMicros() float64 {
	return float64(g.warmupPeriodMicros) / g.maxPermits
}

func (g *guava) resync(nowMicros int64) {
	if nowMicros > g.nextFreeTicketMicros {
		newPermits := float64(nowMicros-g.nextFreeTicketMicros) / g.coolDownIntervalMicros()
		g.storedPermits = math.Min(g.maxPermits, g.storedPermits+newPermits)
		g.nextFreeTicketMicros = nowMicros
	}
}

func (g *guava) reserveEarliestAvailable(requiredPermits int64, nowMicros int64) int64 {
	g.resync(nowMicros)
	returnValue := g.nextFreeTicketMicros
	storedPermitsToSpend := math.Min(float64(requiredPermits), g.storedPermits)
	freshPermits := float64(requiredPermits) - storedPermitsToSpend
	waitMicros := g.storedPermitsToWaitTime(g.storedPermits, storedPermitsToSpend) + int64(freshPermits*g.stableIntervalMicros)
	g.nextFreeTicketMicros += waitMicros // saturatedAdd: never near the limit here
	g.storedPermits -= storedPermitsToSpend
	return returnValue
}

// tryAcquire is RateLimiter.tryAcquire(permits, timeoutMicros) answered at
// once: canAcquire, then reserve (without the sleep).
func (g *guava) tryAcquire(permits, timeoutMicros, nowMicros int64) bool {
	if g.nextFreeTicketMicros-timeoutMicros > nowMicros { // !canAcquire
		return false
	}
	g.reserveEarliestAvailable(permits, nowMicros)
	return true
}

var warmCases = []struct {
	name           string
	window, warmup time.Duration
	limit, burst   int64
}{
	{"10/s warm 1s burst 1", time.Second, time.Second, 10, 1},
	{"10/s warm 5s", time.Second, 5 * time.Second, 10, 0},
	{"100/s warm 2s burst 20", time.Second, 2 * time.Second, 100, 20},
	{"3/s warm 10s burst 4", time.Second, 10 * time.Second, 3, 4},
	{"1000/min warm 30s burst 100", time.Minute, 30 * time.Second, 1000, 100},
}

// TestWarmUpMatchesGuava: for unit costs, WarmUp admits exactly when Guava's
// tryAcquire(1, (Burst−1)·T) does, and its state (next, stored permits)
// follows Guava's bit for bit, from cold through saturated use, idling
// and use again.
func TestWarmUpMatchesGuava(t *testing.T) {
	t.Parallel()
	for i, tc := range warmCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := NewWarmUp(tc.window, tc.warmup, tc.limit, tc.burst)
			rng := rand.New(rand.NewPCG(21, uint64(i)))
			now := int64(1_800_000_000) * int64(time.Second)
			ref := newGuava(tc.window, tc.warmup, tc.limit, micros(now))
			s := w.Fresh(now)
			timeout := w.room(1)
			tnano := int64(w.stable * 1000)
			var allowed, denied int
			for step := 0; step < 6000; step++ {
				now += warmGap(rng, tnano, int64(tc.warmup))
				at := fmt.Sprintf("step %d t=%d state=%+v", step, now, s)
				want := ref.tryAcquire(1, timeout, micros(now))
				var ok bool
				s, ok = w.admit(s, now, 1)
				require.Equal(t, want, ok, at)
				if ok {
					allowed++
				} else {
					denied++
				}
				require.Equal(t, ref.nextFreeTicketMicros, s.Next, at)
				require.Equal(t, ref.storedPermits, s.Stored, at)
			}
			require.Positive(t, allowed)
			require.Positive(t, denied)
		})
	}
}

// TestWarmUpCostsMatchGuava: for any cost, an admitted request moves the
// state exactly as Guava's reserveEarliestAvailable does, and the admission
// test is the documented one: max(next − t, 0) ≤ ⌊(Burst − n)·T⌋.
func TestWarmUpCostsMatchGuava(t *testing.T) {
	t.Parallel()
	for i, tc := range warmCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := NewWarmUp(tc.window, tc.warmup, tc.limit, tc.burst)
			rng := rand.New(rand.NewPCG(22, uint64(i)))
			now := int64(1_800_000_000) * int64(time.Second)
			ref := newGuava(tc.window, tc.warmup, tc.limit, micros(now))
			s := w.Fresh(now)
			tnano := int64(w.stable * 1000)
			for step := 0; step < 6000; step++ {
				now += warmGap(rng, tnano, int64(tc.warmup))
				n := 1 + rng.Int64N(w.burst)
				at := fmt.Sprintf("step %d t=%d n=%d state=%+v", step, now, n, s)
				room := int64(math.Floor(float64(w.burst-n) * ref.stableIntervalMicros))
				want := max(ref.nextFreeTicketMicros-micros(now), 0) <= room
				if want {
					ref.reserveEarliestAvailable(n, micros(now))
				}
				var ok bool
				s, ok = w.admit(s, now, n)
				require.Equal(t, want, ok, at)
				require.Equal(t, ref.nextFreeTicketMicros, s.Next, at)
				require.Equal(t, ref.storedPermits, s.Stored, at)
			}
		})
	}
}

// warmGap returns a random arrival gap: mostly under an interval (use),
// sometimes several intervals, sometimes a long idle (up to twice the
// warm-up: the key goes cold).
func warmGap(r *rand.Rand, interval, warmup int64) int64 {
	switch r.IntN(50) {
	case 0:
		return r.Int64N(2 * warmup)
	case 1, 2, 3:
		return r.Int64N(10 * interval)
	}
	return r.Int64N(interval)
}

// TestWarmUpRetryAfterExact: after a denial at t, the same cost is denied at
// t+RetryAfter−1ns and admitted at t+RetryAfter; Remaining is the largest
// cost admitted now; ResetAfter is when the debt is gone.
func TestWarmUpRetryAfterExact(t *testing.T) {
	t.Parallel()
	for i, tc := range warmCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := NewWarmUp(tc.window, tc.warmup, tc.limit, tc.burst)
			rng := rand.New(rand.NewPCG(23, uint64(i)))
			now := int64(1_800_000_000)*int64(time.Second) + 123 // not on a µs
			s := w.Fresh(now)
			tnano := int64(w.stable * 1000)
			checked := 0
			for step := 0; step < 3000; step++ {
				now += warmGap(rng, tnano, int64(tc.warmup))
				n := 1 + rng.Int64N(w.burst)
				rem := w.Remaining(s, now)
				require.GreaterOrEqual(t, rem, int64(0))
				require.LessOrEqual(t, rem, w.burst)
				if rem > 0 {
					_, ok := w.admit(s, now, rem)
					require.True(t, ok, "Remaining %d not admitted", rem)
				}
				if rem < w.burst {
					_, ok := w.admit(s, now, rem+1)
					require.False(t, ok, "Remaining+1 = %d admitted", rem+1)
				}
				next, ok := w.admit(s, now, n)
				cn, cok, crem, creset, cretry := w.Check(s, now, n)
				require.Equal(t, next, cn, "Check's state")
				require.Equal(t, ok, cok, "Check's decision")
				require.Equal(t, w.retryAfter(s, now, n), cretry, "Check's RetryAfter")
				require.Equal(t, w.Remaining(next, now), crem, "Check's Remaining")
				require.Equal(t, w.ResetAfter(next, now), creset, "Check's ResetAfter")
				if ok {
					require.Zero(t, w.retryAfter(s, now, n))
					s = next
				} else {
					ra := int64(w.retryAfter(s, now, n))
					require.Positive(t, ra)
					_, early := w.admit(s, now+ra-1, n)
					_, onTime := w.admit(s, now+ra, n)
					require.False(t, early, "step %d: admitted 1ns before RetryAfter %d", step, ra)
					require.True(t, onTime, "step %d: denied at RetryAfter %d", step, ra)
					checked++
				}
				if ra := int64(w.ResetAfter(s, now)); ra > 0 {
					require.Equal(t, w.burst, w.Remaining(s, now+ra))
					require.Less(t, w.Remaining(s, now+ra-1), w.burst)
				}
			}
			require.Positive(t, checked)
		})
	}
}

// TestWarmUpRamp: a cold key admits about a third of its burst at once and
// then one unit per 3T; after P of saturated use it admits one per T, as a
// GCRA; after idling it is cold again.
func TestWarmUpRamp(t *testing.T) {
	t.Parallel()
	const burst = 30
	w := NewWarmUp(time.Second, 10*time.Second, 10, burst) // T = 100ms, P = 10s
	now := int64(1_800_000_000) * int64(time.Second)
	s := w.Fresh(now)
	first := 0
	for {
		var ok bool
		if s, ok = w.admit(s, now, 1); !ok {
			break
		}
		first++
	}
	require.InDelta(t, burst/3, first, 2, "cold burst")
	// Saturated use: retry at every RetryAfter, count admissions per
	// second of the first and of the last second of 20 s.
	count := func(from, to int64) int {
		c := 0
		for now < to {
			if ra := w.retryAfter(s, now, 1); ra > 0 {
				now += int64(ra)
				continue
			}
			s, _ = w.admit(s, now, 1)
			if now >= from {
				c++
			}
		}
		return c
	}
	start := now
	cold := count(start, start+int64(time.Second))
	_ = count(start+int64(time.Second), start+19*int64(time.Second))
	warm := count(start+19*int64(time.Second), start+20*int64(time.Second))
	require.InDelta(t, 10.0/3, cold, 1.5, "cold rate per second")
	require.InDelta(t, 10, warm, 1, "warm rate per second")
	require.InDelta(t, 0, s.Stored, 1e-9, "warm: no stored permits")
	// Idle for the warm-up period and the bucket's refill: cold again.
	now += int64(20 * time.Second)
	require.True(t, w.Idle(s, now))
}
