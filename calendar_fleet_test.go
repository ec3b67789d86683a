package sluice_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// zoneSeq names the zones testZone writes.
var zoneSeq atomic.Int64

// testZone writes a time zone whose local midnight falls at midnight (to
// the second) and returns its name: a real store's clock cannot be set, so
// a test that needs a period to end while it runs moves the zone instead.
// The zone is a TZif file of one fixed offset (RFC 8536, version 1).
func testZone(t *testing.T, midnight time.Time) string {
	t.Helper()
	if zoneDir == "" {
		t.Skip("no time zone directory of the tests' own (TestMain)")
	}
	off := -(midnight.Unix() % 86400) // local = UTC + off: 00:00:00 at midnight
	b := append([]byte("TZif"), make([]byte, 16)...)
	for _, n := range []uint32{0, 0, 0, 0, 1, 4} { // isut, isstd, leap, times, types, chars
		b = binary.BigEndian.AppendUint32(b, n)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(int32(off)))
	b = append(b, 0, 0, 'T', 'S', 'T', 0)
	name := fmt.Sprintf("Sluicetest/Z%d", zoneSeq.Add(1))
	p := filepath.Join(zoneDir, name)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, b, 0o644))
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	require.Zero(t, midnight.In(loc).Hour())
	require.Zero(t, midnight.In(loc).Minute()+midnight.In(loc).Second())
	return name
}

// TestCalendarFleetBoundary: three limiters on one throwaway store share a
// daily quota whose day ends while they hammer one key from three
// goroutines each. In each day the fleet admits at most the bound of a
// fixed window, L·(1+ε) in Mode Eventual (docs/design-bound.md) and L in
// Mode Strict, placing a check that straddles the midnight by the time its
// ResetAfter says it was decided at (which must be inside the check); it
// admits nearly L in each (the key starts the new day whole), and an
// admission's ResetAfter ends at the midnight.
//
// Not parallel with the package's other tests (its two modes run side by
// side): an Eventual check is decided on the time the limiter's ticker
// publishes, which a process with more busy goroutines than cores holds
// back (localcache's clock.go bounds the units admitted on it, not its
// lag), and a ResetAfter that much later than the midnight is out of the
// slack. The -short lane runs several parallel tests at once (TestMain).
func TestCalendarFleetBoundary(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range []policy.Mode{policy.Eventual, policy.Strict} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			const (
				limit  = 300
				budget = 0.05
				slack  = 20 * time.Millisecond // the store's clock against ours
			)
			// The fleet hammers the key for lead on each side of the
			// midnight: 1.2s in the full run; 0.6s under -short, which
			// still spends each day's limit many times over (the denials
			// are counted in tens of thousands).
			lead := 1200 * time.Millisecond
			if testing.Short() {
				lead = 600 * time.Millisecond
			}
			midnight := time.Now().Add(lead + 2300*time.Millisecond).Truncate(time.Second)
			rule := policy.Rule{Name: "daily", Limit: limit, Algorithm: policy.FixedWindow, Period: policy.Day, TimeZone: testZone(t, midnight), Mode: mode}
			ls := eventualFleet(t, srv, 3, "cal-"+mode.String(), budget, rule)
			require.Greater(t, time.Until(midnight), lead+300*time.Millisecond, "the fleet took too long to start")
			time.Sleep(time.Until(midnight.Add(-lead)))

			type admission struct{ t0, t1, reset time.Time }
			var (
				mu       sync.Mutex
				admitted []admission
				denied   [2]int // before and after the midnight
				longest  time.Duration
			)
			stop := midnight.Add(lead)
			var wg sync.WaitGroup
			for i, l := range ls {
				for g := range 3 {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
						for time.Now().Before(stop) {
							t0 := time.Now()
							d, err := l.Allow(context.Background(), "daily", "k")
							t1 := time.Now()
							if !assert.NoError(t, err) {
								return
							}
							mu.Lock()
							longest = max(longest, t1.Sub(t0))
							switch {
							case d.Allowed:
								admitted = append(admitted, admission{t0, t1, t0.Add(d.ResetAfter)})
							case t1.Before(midnight):
								denied[0]++
							default:
								denied[1]++
							}
							mu.Unlock()
							if rng.IntN(40) == 0 {
								time.Sleep(time.Duration(rng.Int64N(int64(5 * time.Millisecond))))
							}
						}
					})
				}
			}
			wg.Wait()

			// A check that straddles the midnight (within the clocks' slack)
			// is placed by the time it was decided at, which its ResetAfter
			// tells (the period's end less that time): it must fall inside
			// the check, within the slack.
			var before, after, placed int
			for _, a := range admitted {
				switch {
				case a.t1.Before(midnight.Add(-slack)):
					before++
					assert.WithinRange(t, a.reset, midnight.Add(-longest-slack), midnight.Add(slack), "ResetAfter ends the day")
				case !a.t0.Before(midnight.Add(slack)):
					after++
				default:
					placed++
					end := midnight
					if a.reset.Sub(midnight) > time.Hour {
						end = midnight.Add(24 * time.Hour)
						after++
					} else {
						before++
					}
					at := a.t0.Add(end.Sub(a.reset)) // when it was decided
					assert.WithinRange(t, at, a.t0.Add(-slack), a.t1.Add(slack), "a straddling check decided in the day its ResetAfter names")
				}
			}
			bound := limit + int(budget*limit)
			if mode == policy.Strict {
				bound = limit
			}
			t.Logf("%v: admitted %d in the day that ended, %d in the one that began (%d of them placed by their ResetAfter), bound %d per day; denied %v; longest check %v", mode, before, after, placed, bound, denied, longest)
			assert.LessOrEqual(t, before, bound, "the day that ended")
			assert.LessOrEqual(t, after, bound, "the day that began")
			assert.GreaterOrEqual(t, before, limit*9/10, "a saturated key gets its day's limit")
			assert.GreaterOrEqual(t, after, limit*9/10, "the key starts the new day whole")
			assert.Positive(t, denied[0], "the day that ended was spent")
			assert.Positive(t, denied[1], "the day that began was spent")
		})
	}
}
