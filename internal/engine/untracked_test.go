package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/apierr"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/syncer"
)

// fullEngine returns the engine of rule on a key bound of two keys, filled:
// every other key stays untracked. With a store, on a syncer that is never
// started (a reservation fails: the failure mode decides).
func fullEngine(t *testing.T, rule policy.Rule, mode policy.FailureMode) engine.Engine {
	t.Helper()
	c := &clock{t: 1_700_000_000_000_000_000}
	cfg := engine.Config{Rule: rule, Keys: localcache.NewKeys(2), Now: c.now, ErrorBudget: 0.1, FailureMode: mode, SyncInterval: 100 * time.Millisecond}
	if rule.Mode != policy.Local {
		client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
		t.Cleanup(func() { _ = client.Close() })
		s, err := syncer.New(syncer.Config{Client: client, Prefix: "t", InstanceID: "i", Interval: time.Hour, Timeout: time.Second})
		require.NoError(t, err)
		cfg.Store = s.Rules()
	}
	e, err := engine.New(cfg)
	require.NoError(t, err)
	e.SetFleet(4, false) // believed up: untracked keys go to the store first
	for i := 0; i < 100; i++ {
		_, _ = e.Check(context.Background(), fmt.Sprint("junk-", i%2), 1)
	}
	return e
}

// TestUntrackedKeysDecidedAlone: with the local cache full, each untracked
// key is decided on its own — by the store, or when the store fails it by
// the failure mode — never on a bucket shared with the other untracked keys
// (issue 19: they used to share one overflow entry per rule). The per-key
// algorithms too, Local and as the failure mode of Strict (they used to
// share one overflow entry per table).
func TestUntrackedKeysDecidedAlone(t *testing.T) {
	t.Parallel()
	const limit = 100
	for _, tc := range []struct {
		name   string
		mode   policy.Mode
		algo   policy.Algorithm
		warmUp time.Duration
		fail   policy.FailureMode
		want   int // admitted per key, of 2·limit checks; 0 with same: as many for each key
		same   bool
		err    error
	}{
		{"local", policy.Local, policy.SlidingWindow, 0, policy.FailLocal, limit, false, nil},
		{"eventual/fail-local", policy.Eventual, policy.SlidingWindow, 0, policy.FailLocal, limit / 4, false, nil}, // the share L/N̂
		{"eventual/fail-open", policy.Eventual, policy.SlidingWindow, 0, policy.FailOpen, 2 * limit, false, nil},
		{"eventual/fail-closed", policy.Eventual, policy.SlidingWindow, 0, policy.FailClosed, 0, false, apierr.ErrStoreUnavailable},
		{"strict/fail-local", policy.Strict, policy.SlidingWindow, 0, policy.FailLocal, limit / 4, false, nil},
		{"gcra/local", policy.Local, policy.GCRA, 0, policy.FailLocal, limit, false, nil}, // Burst = Limit
		{"tokenbucket/local", policy.Local, policy.TokenBucket, 0, policy.FailLocal, limit, false, nil},
		{"warmup/local", policy.Local, policy.GCRA, time.Minute, policy.FailLocal, 0, true, nil}, // cold: 3T a unit
		{"slidinglog/local", policy.Local, policy.SlidingLog, 0, policy.FailLocal, limit, false, nil},
		{"gcra/strict/fail-local", policy.Strict, policy.GCRA, 0, policy.FailLocal, limit / 4, false, nil},
		{"slidinglog/strict/fail-local", policy.Strict, policy.SlidingLog, 0, policy.FailLocal, limit / 4, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rule := policy.Rule{Name: "r", Limit: limit, Window: time.Minute, Mode: tc.mode, Algorithm: tc.algo, WarmUp: tc.warmUp}
			e := fullEngine(t, rule, tc.fail)
			first := -1
			for k := range 3 {
				key := fmt.Sprint("stranger-", k)
				got := 0
				for range 2 * limit {
					d, err := e.Check(context.Background(), key, 1)
					if tc.err != nil {
						require.ErrorIs(t, err, tc.err)
					} else {
						require.NoError(t, err)
					}
					if d.Allowed {
						got++
					} else if err == nil {
						assert.Positive(t, d.RetryAfter, key)
					}
				}
				if tc.same {
					require.Positive(t, got, key)
					if first >= 0 {
						assert.Equal(t, first, got, "%s: its own capacity, not a shared one", key)
					}
					first = got
					continue
				}
				assert.Equal(t, tc.want, got, "%s: its own limit, not a shared one", key)
			}
		})
	}
}
