package systemtest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// TestFleetMoveAtOnce: four instances (or eight), 1000 per 10 s or per
// minute (ε = 1 %); one instance admits 300 of a key, then another is
// offered 600 of it, paced (a check every 0.2 ms) or flat out, right away or
// after a pause. The key is offered 900 in all: none of it may be denied,
// however fast its traffic moved (docs/design-bound.md, "Leases that follow
// the traffic"). Before an instance's unused leased units were held to
// holdMost, the second instance admitted 344 to 461 of its 600.
func TestFleetMoveAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		algo  policy.Algorithm
		w     time.Duration
		pause time.Duration
		gap   time.Duration
		n     int
	}{
		{"sliding/10s", policy.SlidingWindow, 10 * time.Second, 0, 200 * time.Microsecond, 4},
		{"sliding/10s/pause", policy.SlidingWindow, 10 * time.Second, 1500 * time.Millisecond, 200 * time.Microsecond, 4},
		{"sliding/10s/flat-out", policy.SlidingWindow, 10 * time.Second, 0, 0, 4},
		{"sliding/10s/flat-out/n=8", policy.SlidingWindow, 10 * time.Second, 0, 0, 8},
		{"fixed/10s/flat-out", policy.FixedWindow, 10 * time.Second, 0, 0, 4},
		{"sliding/1m", policy.SlidingWindow, time.Minute, 0, 200 * time.Microsecond, 4},
		{"sliding/1m/flat-out", policy.SlidingWindow, time.Minute, 0, 0, 4},
		{"token-bucket/10s", policy.TokenBucket, 10 * time.Second, 0, 200 * time.Microsecond, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rule := policy.Rule{Name: "mv", Limit: 1000, Window: tc.w, Algorithm: tc.algo, Mode: policy.Eventual}
			ls := fleet(t, tc.n, func() redis.UniversalClient { return srv.Client(t) }, sluice.Options{ErrorBudget: 0.01, Timeout: time.Second}, rule)
			run := func(l *sluice.Limiter, n int) (ok int) {
				for range n {
					d, err := l.Allow(context.Background(), rule.Name, "k")
					require.NoError(t, err)
					if d.Allowed {
						ok++
					}
					if tc.gap > 0 {
						time.Sleep(tc.gap)
					}
				}
				return ok
			}
			began := time.Now()
			a := run(ls[0], 300)
			time.Sleep(tc.pause)
			moved := time.Now()
			b := run(ls[1], 600)
			t.Logf("%s: first instance %d of 300 in %v, second %d of 600 in %v", tc.name, a, moved.Sub(began)-tc.pause, b, time.Since(moved))
			assert.Equal(t, 300, a, "the first instance")
			assert.Equal(t, 600, b, "the instance the traffic moved to%s", syncCounts(ls))
		})
	}
}
