package sluice_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// TestKeyedFlood floods a limiter of MaxKeys 1000 with 100,000 keys used
// once (10,000 a second of its clock), on a Local rule of each per-key
// algorithm, through sluice.New and Allow, while keys in use are checked:
//
//   - a victim hammered at ten times its rate from a tenth into the flood
//     (past half of the bound) gets no more than its own exact state admits (window.GCRA, reference.Log replayed on its
//     admissions; Burst + r·τ at the stable rate for a warm-up);
//   - steady keys, tracked before the flood and offered 0.9 of their rate,
//     are never denied;
//   - the limiter tracks at most about 5/8 of MaxKeys plus the keys in use;
//   - keys that come after the flood get their own capacity each.
//
// Before the KeyTables had an admission rule, every key past the bound
// shared one overflow bucket: the victim, once the bound was full, got
// whatever that bucket had, and keys used once denied each other.
func TestKeyedFlood(t *testing.T) {
	t.Parallel()
	const (
		maxKeys = 1000
		flood   = 100_000
		floodIv = int64(100 * time.Microsecond)
		limit   = 10
		steadyN = 20
	)
	for _, rule := range []policy.Rule{
		{Name: "tb", Limit: limit, Window: time.Second, Algorithm: policy.TokenBucket, Mode: policy.Local},
		{Name: "gcra", Limit: limit, Window: time.Second, Algorithm: policy.GCRA, Mode: policy.Local, Burst: 5},
		{Name: "warm", Limit: limit, Window: time.Second, Algorithm: policy.GCRA, Mode: policy.Local, WarmUp: time.Second},
		{Name: "log", Limit: limit, Window: time.Second, Algorithm: policy.SlidingLog, Mode: policy.Local},
	} {
		t.Run(rule.Name, func(t *testing.T) {
			t.Parallel()
			c := newFakeClock(1_800_000_000 * int64(time.Second))
			l, err := sluice.New(sluice.Options{Clock: c, MaxKeys: maxKeys}, rule)
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			ctx := context.Background()
			allow := func(key string) bool {
				d, err := l.Allow(ctx, rule.Name, key)
				require.NoError(t, err)
				return d.Allowed
			}
			iv := int64(time.Second) / limit
			steadyIv := iv * 10 / 9
			next := make([]int64, steadyN)
			for i := range next {
				next[i] = c.nanos() + int64(i)*steadyIv/steadyN
			}
			checkSteady := func() (denied int) {
				for i := range next {
					if c.nanos() >= next[i] {
						if !allow(fmt.Sprint("steady-", i)) {
							denied++
						}
						next[i] += steadyIv
					}
				}
				return denied
			}
			// The steady keys are in use before the flood (a warm-up's
			// warmed up: a cold key is slow by design).
			before := int64(time.Second)
			if rule.WarmUp > 0 {
				before = 2 * int64(rule.WarmUp)
			}
			for end := c.nanos() + before; c.nanos() < end; c.add(int64(time.Millisecond)) {
				checkSteady()
			}
			start := c.nanos()
			var victim []int64
			var steadyDenied int
			floodEnd := start + flood*floodIv
			victimStart := start + (floodEnd-start)/10 // past half of the bound
			victimNext := victimStart
			for f := 0; c.nanos() < floodEnd+int64(time.Second); c.add(floodIv) {
				if c.nanos() < floodEnd {
					allow(fmt.Sprint("flood-", f))
					f++
				}
				steadyDenied += checkSteady()
				if c.nanos() >= victimNext {
					if allow("victim") {
						victim = append(victim, c.nanos())
					}
					victimNext += iv / 10
				}
			}
			assert.Zero(t, steadyDenied, "steady keys offered 0.9 of their rate")
			keys := l.Stats().Keys
			assert.LessOrEqual(t, keys, int64(maxKeys*5/8+steadyN+1+5), "keys used once do not fill the bound")

			burst := rule.Burst
			if burst == 0 {
				burst = limit
			}
			switch rule.Algorithm {
			case policy.SlidingLog:
				ref := reference.NewLog(rule.Window, limit)
				for i, at := range victim {
					require.True(t, ref.Allow(at, 1), "victim admission %d: past its own log", i)
				}
			default:
				if rule.WarmUp > 0 {
					for i := range victim {
						for j := i; j < len(victim); j++ {
							span := float64(victim[j]-victim[i]+int64(3*time.Microsecond)*int64(j-i+1)) / float64(iv)
							require.LessOrEqual(t, float64(j-i+1), float64(burst)+span, "victim admissions %d..%d", i, j)
						}
					}
					break
				}
				g := window.NewGCRA(rule.Window, limit, burst)
				tat := int64(0)
				for i, at := range victim {
					n, ok := g.Admit(tat, at, 1)
					require.True(t, ok, "victim admission %d: past its own bucket", i)
					tat = n
				}
			}
			// Keys that come once the flood has drained (every debt it
			// left, 3T a unit of a warm-up's Burst at most, or its last
			// window, has passed), each checked at one instant until
			// denied, get their own capacity, not a shared one.
			elapsed := float64(c.nanos()-victimStart) / float64(iv)
			c.add(int64(3 * time.Second))
			first := -1
			for k := range 3 {
				got := 0
				for allow(fmt.Sprint("stranger-", k)) {
					got++
					require.Less(t, got, 2*limit, "stranger-%d", k)
				}
				if rule.WarmUp == 0 {
					assert.Equal(t, int(min(burst, limit)), got, "stranger-%d: its own capacity", k)
				}
				switch {
				case first < 0:
				case rule.WarmUp > 0:
					// A warm-up key decided on the sketch runs at its cold
					// cost, then its entry starts fully cold with the
					// sketch's debt (keyuntracked.go): where it moves from
					// one to the other (the admission rule's hash seeds and
					// the background sweep's timing vary it from run to
					// run) can be worth a unit, likely why a stranger reads
					// 4 instead of 3 in about 1 run in 60. A shared capacity
					// would leave the next stranger nothing.
					assert.InDelta(t, first, got, 1, "stranger-%d: its own capacity, not a shared one", k)
				default:
					assert.Equal(t, first, got, "stranger-%d: its own capacity, not a shared one", k)
				}
				first = got
			}
			t.Logf("%s: %d keys tracked after %d one-time keys; victim admitted %d in %.0f intervals (burst %d); steady denied %d",
				rule.Name, keys, flood, len(victim), elapsed, burst, steadyDenied)
		})
	}
}
