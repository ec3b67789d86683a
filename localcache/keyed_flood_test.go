package localcache

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/window"
)

// floodEvent is an admission of a key: its time and cost.
type floodEvent struct{ t, n int64 }

// TestKeyTablesFlood floods each KeyTable, under a bound of 1000 keys, with
// 100,000 keys used once (10,000 a second for 10s of simulated time), while
// keys in use are checked, and checks what the flood can no longer do:
//
//   - get a victim key, hammered at ten times its rate from a tenth into
//     the flood (past half of the bound: it is decided on the sketch until
//     the admission rule lets it in) and after it, past what its own exact
//     state admits (window.GCRA and
//     reference.Log replayed on its admissions; for a warm-up key, Burst + r·τ
//     over every interval at the stable rate): it was never decided on a
//     shared entry;
//   - deny steady keys, in use before the flood and offered 0.9 of their
//     rate, or fresh keys once the flood has drained (a debt of τ, or a
//     window, after it);
//   - fill the bound: keys used once stop at about 5/8 of it, plus the keys
//     in use; the sketch's size is fixed.
//
// It logs what the flood still costs: the keys used once that the sketch
// denied although each was under its limit (their cells were full of the
// flood), and the checks of new keys in use (0.9 of their rate, starting
// during the flood) that the sketch denied: at this bound the admission
// rule's sketch halves every 512 sightings, 51ms of this flood, so a key
// seen every 111ms never reaches its threshold while the flood lasts and
// is decided on the sketch throughout.
func TestKeyTablesFlood(t *testing.T) {
	t.Parallel()
	const (
		bound   = 1000
		flood   = 100_000
		floodIv = int64(100 * time.Microsecond) // 10,000 keys a second
		win     = time.Second
		limit   = 10 // T = 100ms
		warmup  = 2 * time.Second
		steadyN = 20
		newN    = 5
	)
	for _, kind := range []string{"gcra", "warm", "log"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			keys := NewKeys(bound)
			var tb tableport.KeyTable
			var err error
			var drain time.Duration // from the flood's last admission to every cell's
			switch kind {
			case "gcra":
				tb, err = NewGCRATable(window.NewGCRA(win, limit, limit), keys)
				drain = win // τ = Burst·T
			case "warm":
				tb, err = NewWarmTable(window.NewWarmUp(win, warmup, limit, limit), keys)
				drain = 3 * win // the cold charge: 3T a unit, τ + 2T at most
			case "log":
				tb, err = NewLogTable(win, limit, keys)
				drain = win + win/logSketchBuckets + time.Millisecond
			}
			require.NoError(t, err)
			iv := int64(win) / limit
			steadyIv := iv * 10 / 9 // 0.9 of the rate
			now := base

			// The steady keys, in use before the flood (the warm-up ones
			// warmed up first: a cold key is slow by design).
			steady := make([]string, steadyN)
			next := make([]int64, steadyN)
			for i := range steady {
				steady[i] = fmt.Sprint("steady-", i)
				next[i] = now + int64(i)*steadyIv/steadyN
			}
			before := int64(win)
			if kind == "warm" {
				before = 2 * int64(warmup)
			}
			for end := now + before; now < end; now += int64(time.Millisecond) {
				for i, k := range steady {
					if now >= next[i] {
						tb.Allow(k, now, 1)
						next[i] += steadyIv
					}
				}
			}
			for _, k := range steady {
				require.True(t, keyTracked(tb, k))
			}

			var victim []floodEvent
			var steadyDenied, floodDenied, newDenied, newChecks int
			newcomers := make([]string, newN)
			newNext := make([]int64, newN)
			for i := range newcomers {
				newcomers[i] = fmt.Sprint("newcomer-", i)
			}
			start := now
			floodEnd := start + flood*floodIv
			end := floodEnd + 2*int64(win)
			// The victim comes a tenth into the flood, when the bound is
			// past half: decided on the sketch until it gets in.
			victimStart := start + (floodEnd-start)/10
			victimNext := victimStart
			for f := 0; now < end; now += floodIv {
				if now < floodEnd {
					if !tb.Allow(fmt.Sprint("flood-", f), now, 1).Allowed {
						floodDenied++
					}
					f++
				}
				for i, k := range steady {
					if now >= next[i] {
						if !tb.Allow(k, now, 1).Allowed {
							steadyDenied++
						}
						next[i] += steadyIv
					}
				}
				if now >= victimNext {
					if tb.Allow("victim", now, 1).Allowed {
						victim = append(victim, floodEvent{now, 1})
					}
					victimNext += iv / 10
				}
				// New keys in use, from the middle of the flood on.
				for i, k := range newcomers {
					if now >= start+(floodEnd-start)/2 && now >= newNext[i] && now < floodEnd {
						if newNext[i] == 0 {
							newNext[i] = now
						}
						newChecks++
						if !tb.Allow(k, now, 1).Allowed {
							newDenied++
						}
						newNext[i] += steadyIv
					}
				}
			}
			assert.Zero(t, steadyDenied, "steady keys offered 0.9 of their rate")
			var newIn int
			for _, k := range newcomers {
				if keyTracked(tb, k) {
					newIn++
				}
			}

			// The victim got at most what its own state admits.
			g := window.NewGCRA(win, limit, limit)
			switch kind {
			case "gcra":
				tat := int64(tatFresh)
				for i, e := range victim {
					n, ok := g.Admit(tat, e.t, e.n)
					require.True(t, ok, "victim admission %d: past its own bucket", i)
					tat = n
				}
			case "log":
				ref := reference.NewLog(win, limit)
				for i, e := range victim {
					require.True(t, ref.Allow(e.t, e.n), "victim admission %d: past its own log", i)
				}
			case "warm":
				for i := range victim {
					for j := i; j < len(victim); j++ {
						span := float64(victim[j].t-victim[i].t+int64(3*time.Microsecond)*int64(j-i+1)) / float64(iv)
						require.LessOrEqual(t, float64(j-i+1), limit+span, "victim admissions %d..%d", i, j)
					}
				}
			}
			elapsed := float64(now-victimStart) / float64(iv)
			assert.LessOrEqual(t, float64(len(victim)), limit+elapsed)

			// The bound: keys used once stop at about 5/8 of it.
			inUse := int64(steadyN + newN + 1)
			assert.LessOrEqual(t, keys.tracked(), int64(bound))
			assert.LessOrEqual(t, keys.tracked(), int64(bound*5/8)+inUse+5)
			var sketchBytes int
			switch tb := tb.(type) {
			case *GCRATable:
				sketchBytes = tb.sketch().bytes()
				assert.Equal(t, 4*1024*8, sketchBytes)
			case *WarmTable:
				sketchBytes = tb.sketch().bytes()
				assert.Equal(t, 4*1024*8, sketchBytes)
			case *LogTable:
				sketchBytes = tb.sketch().bytes()
				assert.Equal(t, 4*64*(logSketchBuckets+1)*8, sketchBytes)
			}

			// Once the flood has drained, fresh keys are admitted.
			now += int64(drain)
			var freshDenied int
			for i := range 100 {
				if !tb.Allow(fmt.Sprint("fresh-", i), now, 1).Allowed {
					freshDenied++
				}
			}
			assert.Zero(t, freshDenied, "fresh keys after the flood")

			t.Logf("%s: %d of %d keys tracked after %d one-time keys (%d checks untracked); sketch %d B", kind, keys.tracked(), bound, flood, keys.Usage().Untracked(), sketchBytes)
			t.Logf("%s: victim admitted %d in %.0f intervals (bound %d + %.0f); steady denied %d", kind, len(victim), elapsed, limit, elapsed, steadyDenied)
			t.Logf("%s: one-time keys denied under their limit %d of %d (%.1f%%); new keys in use: %d of %d got in, %d of their %d checks denied", kind, floodDenied, flood, 100*float64(floodDenied)/flood, newIn, newN, newDenied, newChecks)
		})
	}
}
