package localcache

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// TestWinSketchNeverOverAdmits offers many keys random costs over several
// windows, against a reference counter per key (reference.Counter, the key
// alone): the sketch admits nothing the key's own counter would not, however
// crowded it is. A roomy sketch admits each key exactly what its counter
// admits; a crowded one denies some keys under their limit (it over-counts).
func TestWinSketchNeverOverAdmits(t *testing.T) {
	t.Parallel()
	geos := []struct {
		name string
		geo  window.Sliding
	}{
		{"sliding", window.NewSliding(time.Second, 10)},
		{"weighted", window.NewWeighted(time.Second, 4)},
		{"fixed", window.NewFixed(time.Second)},
	}
	for _, g := range geos {
		for _, tc := range []struct {
			name     string
			width    int
			keys     int
			crowded  bool
			limit    int64
			maxCost  int64
			duration time.Duration
		}{
			{"roomy", 4096, 20, false, 50, 3, 3 * time.Second},
			{"crowded", 64, 2000, true, 20, 2, 2 * time.Second},
		} {
			t.Run(g.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				s := newWinSketch(g.geo, tc.width, max(g.geo.Span(), 2))
				ref := make([]*reference.Counter, tc.keys) // each key alone
				for i := range ref {
					ref[i] = reference.NewCounter(g.geo, tc.limit)
				}
				rng := rand.New(rand.NewPCG(3, uint64(tc.keys)))
				now := bucketStart(g.geo, 0)
				end := now + int64(tc.duration)
				var falseDenials, checks int
				for now < end {
					i := rng.IntN(tc.keys)
					key := fmt.Sprint("key-", i)
					n := 1 + rng.Int64N(tc.maxCost)
					// The sketch's estimate is at least the key's own
					// (each cell holds at least its counts), so whatever
					// it admits the key's own counter admits.
					fits := n <= g.geo.Parts(now, ref[i].Count).Room(tc.limit)
					v := s.decide(key, now, n, tc.limit)
					checks++
					switch v.Status {
					case verdict.Allowed:
						require.True(t, fits, "%s admitted past its limit at %d", key, now)
						require.GreaterOrEqual(t, v.Remaining, int64(0))
						ref[i].Add(now, n)
					case verdict.OverLimit:
						if fits {
							falseDenials++
						}
						require.NotZero(t, v.RetryAfter)
					default:
						t.Fatalf("status %v", v.Status)
					}
					now += int64(time.Millisecond) / 4
				}
				if tc.crowded {
					assert.Positive(t, falseDenials, "a crowded sketch denies some keys under their limit")
				} else {
					assert.Zero(t, falseDenials, "alone in its cells, a key is limited exactly")
				}
				t.Logf("%d checks, %d denied under the limit", checks, falseDenials)
			})
		}
	}
}

// TestWinSketchExactAlone: one key alone in a sketch is limited exactly as
// a table entry limits it: Limit per window, room again once the window has
// passed, RetryAfter as the window math says.
func TestWinSketchExactAlone(t *testing.T) {
	t.Parallel()
	for _, geo := range []window.Sliding{window.NewSliding(time.Minute, 6), window.NewFixed(time.Minute)} {
		t.Run(fmt.Sprint(geo.Span()), func(t *testing.T) {
			t.Parallel()
			const limit = 10
			s := newWinSketch(geo, 64, max(geo.Span(), 2))
			ref := mkTable(t, geo, limit, false)
			now := bucketStart(geo, 0) + geo.Sub()/2
			for i := range limit + 2 {
				got, want := s.decide("k", now, 1, limit), ref.AllowAt("k", now, 1)
				require.Equal(t, want, got, "check %d", i)
			}
			assert.Equal(t, int64(0), s.room("k", now, limit))
			assert.Equal(t, int64(limit), s.room("other", now, limit), "another key is not charged")
			later := now + int64(geo.Window()) + geo.Sub()
			assert.Equal(t, ref.AllowAt("k", later, 3), s.decide("k", later, 3, limit), "the window has passed")
			assert.Equal(t, verdict.OverLimit, s.decide("k", later, limit+1, limit).Status)
			assert.Equal(t, 4*64*max(geo.Span(), 2)*8, s.bytes())
		})
	}
}

// TestWinSketchConcurrent: goroutines racing on one key, and on keys that
// share its cells, never get it past its limit. Run with -race.
func TestWinSketchConcurrent(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Minute, 10)
	const limit = 100
	s := newWinSketch(geo, 64, geo.Span())
	now := bucketStart(geo, 0)
	var hot atomic.Int64
	hammer(func(g int) {
		for i := range 3 * limit {
			if s.decide("hot", now, 1, limit).Status == verdict.Allowed {
				hot.Add(1)
			}
			s.decide(fmt.Sprint("g", g, "-", i), now, 1, limit)
		}
	})
	require.LessOrEqual(t, hot.Load(), int64(limit))
	require.Positive(t, hot.Load())
	est, _ := s.estimate(s.bases("hot"), now)
	require.GreaterOrEqual(t, est.Whole, hot.Load(), "the sketch holds every admission (denials are taken back)")
}

// TestWinSketchStaleTime: a check whose time is a window behind another's
// on the same cell is denied rather than counted in the wrong bucket.
func TestWinSketchStaleTime(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Second, 2)
	s := newWinSketch(geo, 64, geo.Span())
	now := bucketStart(geo, 10)
	require.Equal(t, verdict.Allowed, s.decide("k", now, 1, 5).Status)
	old := now - 3*geo.Sub() // same slot, older bucket
	v := s.decide("k", old, 1, 5)
	assert.Equal(t, verdict.OverLimit, v.Status)
	assert.Positive(t, v.RetryAfter)
	assert.Equal(t, int64(4), s.room("k", now, 5), "the stale check left nothing behind")
}
