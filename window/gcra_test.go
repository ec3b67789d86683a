package window_test

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/window"
)

// gcraCases are the rules the GCRA and token bucket tests run on: exact
// intervals, a rounded one (1s/3), and bursts below, at and above the
// limit.
var gcraCases = []struct {
	name   string
	window time.Duration
	limit  int64
	burst  int64
}{
	{"10/s burst=limit", time.Second, 10, 0},
	{"10/s burst=1", time.Second, 10, 1},
	{"10/s burst=25", time.Second, 10, 25},
	{"3/s rounded T", time.Second, 3, 5},
	{"1000/min", time.Minute, 1000, 50},
	{"1/h", time.Hour, 1, 2},
}

// ratBucket is the exact reference: a token bucket on rational numbers,
// refilled at 1/T token per ns up to Burst, that admits n when it holds n
// tokens.
type ratBucket struct {
	perNs  *big.Rat // 1/T
	burst  *big.Rat
	tokens *big.Rat
	at     int64
}

func newRatBucket(interval, burst int64, t int64) *ratBucket {
	b := big.NewRat(burst, 1)
	return &ratBucket{perNs: big.NewRat(1, interval), burst: b, tokens: new(big.Rat).Set(b), at: t}
}

func (r *ratBucket) refill(t int64) {
	if t <= r.at {
		return
	}
	add := new(big.Rat).Mul(big.NewRat(t-r.at, 1), r.perNs)
	r.tokens.Add(r.tokens, add)
	if r.tokens.Cmp(r.burst) > 0 {
		r.tokens.Set(r.burst)
	}
	r.at = t
}

func (r *ratBucket) allow(t, n int64) bool {
	r.refill(t)
	need := big.NewRat(n, 1)
	if r.tokens.Cmp(need) < 0 {
		return false
	}
	r.tokens.Sub(r.tokens, need)
	return true
}

// remaining is ⌊tokens⌋.
func (r *ratBucket) remaining() int64 {
	return new(big.Int).Quo(r.tokens.Num(), r.tokens.Denom()).Int64()
}

// until returns the ns until the bucket holds want tokens: ⌈(want − tokens)·T⌉.
func (r *ratBucket) until(want int64) int64 {
	d := new(big.Rat).Sub(big.NewRat(want, 1), r.tokens)
	if d.Sign() <= 0 {
		return 0
	}
	d.Quo(d, r.perNs)
	q, m := new(big.Int).QuoRem(d.Num(), d.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// arrivals returns a random arrival gap: mostly within an interval (the
// bucket drains), sometimes long (it refills).
func arrivals(r *rand.Rand, interval int64) int64 {
	switch r.IntN(10) {
	case 0:
		return r.Int64N(20 * interval)
	case 1:
		return 0
	}
	return r.Int64N(interval)
}

// TestGCRAMatchesExactBucket: on random arrivals and costs, GCRA decides
// what the rational token bucket decides, and its Remaining, RetryAfter and
// ResetAfter are the reference's whole tokens, time until n tokens and time
// until full.
func TestGCRAMatchesExactBucket(t *testing.T) {
	t.Parallel()
	for i, tc := range gcraCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := window.NewGCRA(tc.window, tc.limit, tc.burst)
			rng := rand.New(rand.NewPCG(11, uint64(i)))
			now := int64(1_800_000_000) * int64(time.Second)
			ref := newRatBucket(g.Interval(), g.Burst(), now)
			tat := int64(0) // far in the past: a full bucket
			var allowed, denied int
			for step := 0; step < 4000; step++ {
				now += arrivals(rng, g.Interval())
				n := 1 + rng.Int64N(min(g.Burst()+1, 4)) // sometimes Burst+1
				at := fmt.Sprintf("step %d t=%d n=%d tat=%d", step, now, n, tat)
				want := ref.allow(now, n)
				next, ok := g.Admit(tat, now, n)
				require.Equal(t, want, ok, at)
				if ok {
					allowed++
					require.Zero(t, g.RetryAfter(tat, now, n), at)
					tat = next
				} else {
					denied++
					if n > g.Burst() {
						require.Equal(t, time.Duration(-1), g.RetryAfter(tat, now, n), at)
					} else {
						require.Equal(t, time.Duration(ref.until(n)), g.RetryAfter(tat, now, n), at)
					}
				}
				require.Equal(t, ref.remaining(), g.Remaining(tat, now), at)
				require.Equal(t, time.Duration(ref.until(g.Burst())), g.ResetAfter(tat, now), at)
			}
			require.Positive(t, allowed)
			require.Positive(t, denied)
		})
	}
}

// TestGCRAConvention: a full bucket admits exactly Burst at once, then one
// unit per T; a cost above Burst never passes.
func TestGCRAConvention(t *testing.T) {
	t.Parallel()
	for _, tc := range gcraCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := window.NewGCRA(tc.window, tc.limit, tc.burst)
			const now = int64(1e18)
			tat := int64(0)
			for i := int64(0); i < g.Burst(); i++ {
				require.Equal(t, g.Burst()-i, g.Remaining(tat, now))
				var ok bool
				tat, ok = g.Admit(tat, now, 1)
				require.True(t, ok, "unit %d of the burst", i)
			}
			_, ok := g.Admit(tat, now, 1)
			require.False(t, ok, "one past the burst")
			require.Equal(t, time.Duration(g.Interval()), g.RetryAfter(tat, now, 1))
			require.Equal(t, time.Duration(g.Tolerance()), g.ResetAfter(tat, now))
			// One more every T.
			for i := int64(1); i <= 3; i++ {
				at := now + i*g.Interval()
				_, ok := g.Admit(tat, at-1, 1)
				require.False(t, ok)
				tat, ok = g.Admit(tat, at, 1)
				require.True(t, ok)
			}
			// A cost of Burst on a full bucket, and Burst+1 never.
			_, ok = g.Admit(0, now, g.Burst())
			require.True(t, ok)
			_, ok = g.Admit(0, now, g.Burst()+1)
			require.False(t, ok)
			require.Equal(t, time.Duration(-1), g.RetryAfter(0, now, g.Burst()+1))
		})
	}
}

// TestGCRARetryAfterExact: after a denial at t, the same cost is denied at
// t+RetryAfter−1ns and admitted at t+RetryAfter when nothing else is; the
// key is full (Remaining = Burst) exactly at t+ResetAfter.
func TestGCRARetryAfterExact(t *testing.T) {
	t.Parallel()
	for i, tc := range gcraCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := window.NewGCRA(tc.window, tc.limit, tc.burst)
			rng := rand.New(rand.NewPCG(12, uint64(i)))
			now := int64(1e18)
			tat := int64(0)
			checked := 0
			for step := 0; step < 3000; step++ {
				now += arrivals(rng, g.Interval())
				n := 1 + rng.Int64N(g.Burst())
				next, ok := g.Admit(tat, now, n)
				if ok {
					tat = next
				} else {
					ra := int64(g.RetryAfter(tat, now, n))
					require.Positive(t, ra)
					_, early := g.Admit(tat, now+ra-1, n)
					_, onTime := g.Admit(tat, now+ra, n)
					require.False(t, early, "step %d: admitted 1ns before RetryAfter %d", step, ra)
					require.True(t, onTime, "step %d: denied at RetryAfter %d", step, ra)
					checked++
				}
				if ra := int64(g.ResetAfter(tat, now)); ra > 0 {
					require.Equal(t, g.Burst(), g.Remaining(tat, now+ra))
					require.Greater(t, g.ResetAfter(tat, now+ra-1), time.Duration(0))
				}
			}
			require.Positive(t, checked)
		})
	}
}

// TestTokenBucketSameAdmissionAsGCRA: the classic two-number token bucket
// and the one-timestamp GCRA admit the same costs at the same times, with
// the same Remaining and RetryAfter, on random monotone arrivals.
func TestTokenBucketSameAdmissionAsGCRA(t *testing.T) {
	t.Parallel()
	for i, tc := range gcraCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := window.NewGCRA(tc.window, tc.limit, tc.burst)
			b := reference.NewTokenBucket(tc.window, tc.limit, tc.burst)
			rng := rand.New(rand.NewPCG(13, uint64(i)))
			now := int64(1_800_000_000) * int64(time.Second)
			tat, s := int64(0), b.Full(now)
			for step := 0; step < 5000; step++ {
				now += arrivals(rng, g.Interval())
				n := 1 + rng.Int64N(g.Burst()+1)
				at := fmt.Sprintf("step %d t=%d n=%d", step, now, n)
				var okG, okB bool
				require.Equal(t, g.RetryAfter(tat, now, n), b.RetryAfter(s, now, n), at)
				tat, okG = g.Admit(tat, now, n)
				s, okB = b.Admit(s, now, n)
				require.Equal(t, okB, okG, at)
				require.Equal(t, b.Remaining(s, now), g.Remaining(tat, now), at)
			}
		})
	}
}

// TestGCRAHostileState: states and times at the edges of int64 neither
// panic nor admit past the tolerance.
func TestGCRAHostileState(t *testing.T) {
	t.Parallel()
	g := window.NewGCRA(time.Second, 10, 0)
	const maxI, minI = int64(^uint64(0) >> 1), -int64(^uint64(0)>>1) - 1
	for _, tc := range []struct{ tat, t int64 }{
		{maxI, 0}, {minI, 0}, {0, maxI}, {0, minI}, {maxI, minI}, {minI, maxI}, {maxI - 5, maxI - 10},
	} {
		next, ok := g.Admit(tc.tat, tc.t, 1)
		if ok {
			require.LessOrEqual(t, uint64(next)-uint64(tc.t), uint64(g.Tolerance()), "%+v", tc)
		}
		require.GreaterOrEqual(t, g.Remaining(tc.tat, tc.t), int64(0))
		require.GreaterOrEqual(t, g.ResetAfter(tc.tat, tc.t), time.Duration(0))
		require.GreaterOrEqual(t, g.RetryAfter(tc.tat, tc.t, 1), time.Duration(0))
	}
}
