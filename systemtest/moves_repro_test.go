package systemtest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// TestMoveReproduction plays the operator's scenario: four instances, 1000
// per 10 s (ε = 1 %), one instance admits 300 of a key, then another gets
// 600 of it, right away or after a pause. It logs what the second admitted.
func TestMoveReproduction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		algo  policy.Algorithm
		w     time.Duration
		pause time.Duration
		gap   time.Duration
	}{
		{"sliding/10s", policy.SlidingWindow, 10 * time.Second, 0, 200 * time.Microsecond},
		{"sliding/10s/pause", policy.SlidingWindow, 10 * time.Second, 1500 * time.Millisecond, 200 * time.Microsecond},
		{"sliding/10s/flat-out", policy.SlidingWindow, 10 * time.Second, 0, 0},
		{"sliding/1m", policy.SlidingWindow, time.Minute, 0, 200 * time.Microsecond},
		{"sliding/1m/flat-out", policy.SlidingWindow, time.Minute, 0, 0},
		{"token-bucket/10s", policy.TokenBucket, 10 * time.Second, 0, 200 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rule := policy.Rule{Name: "mv", Limit: 1000, Window: tc.w, Algorithm: tc.algo, Mode: policy.Eventual}
			ls := fleet(t, 4, func() redis.UniversalClient { return srv.Client(t) }, sluice.Options{ErrorBudget: 0.01, Timeout: time.Second}, rule)
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
		})
	}
}
