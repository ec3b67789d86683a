package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/engine"
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
		cfg.Store = s
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
// (issue 19: they used to share one overflow entry per rule).
func TestUntrackedKeysDecidedAlone(t *testing.T) {
	t.Parallel()
	const limit = 100
	for _, tc := range []struct {
		name string
		mode policy.Mode
		fail policy.FailureMode
		want int // admitted per key, of 2·limit checks
		err  error
	}{
		{"local", policy.Local, policy.FailLocal, limit, nil},
		{"eventual/fail-local", policy.Eventual, policy.FailLocal, limit / 4, nil}, // the share L/N̂
		{"eventual/fail-open", policy.Eventual, policy.FailOpen, 2 * limit, nil},
		{"eventual/fail-closed", policy.Eventual, policy.FailClosed, 0, engine.ErrStoreUnavailable},
		{"strict/fail-local", policy.Strict, policy.FailLocal, limit / 4, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rule := policy.Rule{Name: "r", Limit: limit, Window: time.Minute, Mode: tc.mode}
			e := fullEngine(t, rule, tc.fail)
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
				assert.Equal(t, tc.want, got, "%s: its own limit, not a shared one", key)
			}
		})
	}
}
