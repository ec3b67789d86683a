package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/apierr"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/syncer"
	"github.com/sluicehq/sluice/window"
)

// clock is a settable store clock.
type clock struct{ t int64 }

func (c *clock) now() int64 { return c.t }

// newEngine returns the engine of rule on clock c; with a store, on a syncer
// that is never started (its store counts as down).
func newEngine(t *testing.T, rule policy.Rule, c *clock, mode policy.FailureMode) engine.Engine {
	t.Helper()
	cfg := engine.Config{
		Rule:         rule,
		Keys:         localcache.NewKeys(1000),
		Now:          c.now,
		ErrorBudget:  0.1,
		FailureMode:  mode,
		SyncInterval: 100 * time.Millisecond,
	}
	if rule.Mode != policy.Local {
		client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
		t.Cleanup(func() { _ = client.Close() })
		s, err := syncer.New(syncer.Config{Client: client, Prefix: "t", InstanceID: "i", Interval: time.Hour, Timeout: time.Second})
		require.NoError(t, err)
		cfg.Store = s.Rules()
	}
	e, err := engine.New(cfg)
	require.NoError(t, err)
	return e
}

// TestLocalMatchesReference: a Local engine's decisions and every Result
// field follow reference.Counter, the exact reference of the sliding and fixed
// window, on random arrivals.
func TestLocalMatchesReference(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rule policy.Rule
	}{
		{"sliding B=4", policy.Rule{Name: "r", Limit: 50, Window: time.Second, Precision: 4, Mode: policy.Local}},
		{"sliding B=1", policy.Rule{Name: "r", Limit: 7, Window: time.Minute, Precision: 1, Mode: policy.Local}},
		{"fixed", policy.Rule{Name: "r", Limit: 20, Window: time.Second, Algorithm: policy.FixedWindow, Mode: policy.Local}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &clock{t: 1_700_000_000_000_000_000}
			e := newEngine(t, tc.rule, c, policy.FailLocal)
			geo := window.NewSliding(tc.rule.Window, rulegeo.Buckets(tc.rule))
			if tc.rule.Algorithm == policy.FixedWindow {
				geo = window.NewFixed(tc.rule.Window)
			}
			ref := reference.NewCounter(geo, tc.rule.Limit)
			rng := rand.New(rand.NewPCG(1, uint64(tc.rule.Limit)))
			var allowed, denied int
			for i := 0; i < 3000; i++ {
				c.t += rng.Int64N(int64(tc.rule.Window) / int64(tc.rule.Limit))
				n := 1 + rng.Int64N(3)
				at := fmt.Sprintf("step %d t=%d n=%d", i, c.t, n)
				want := ref.Allow(c.t, n)
				d, err := e.Check(context.Background(), "k", n)
				require.NoError(t, err, at)
				require.Equal(t, want, d.Allowed, at)
				room := max(geo.Parts(c.t, ref.Count).Room(tc.rule.Limit), 0)
				if want {
					allowed++
					// The admission is in the current sub-window.
					require.Equal(t, geo.ResetAfter(c.t), d.ResetAfter, at)
					require.Zero(t, d.RetryAfter, at)
					require.LessOrEqual(t, d.Remaining, room, at)
				} else {
					denied++
					require.Equal(t, room, d.Remaining, at)
					ra := ref.RetryAfter(c.t, n)
					require.Equal(t, time.Duration(ra), d.RetryAfter, at)
					// Until the newest sub-window holding a count leaves.
					require.Equal(t, max(geo.ResetAt(c.t, ref.Count), time.Duration(ra)), d.ResetAfter, at)
				}
				p := e.Peek("k")
				require.Equal(t, room, p.Remaining, at)
				require.Equal(t, room >= 1, p.Allowed, at)
			}
			require.Positive(t, allowed)
			require.Positive(t, denied)
		})
	}
}

// TestEventualCapAndFallback: an Eventual engine admits locally up to its
// divergence cap ⌊ε·L/(N̂+1)⌋, then hands the check to the store; with the
// store down, the failure mode decides.
func TestEventualCapAndFallback(t *testing.T) {
	t.Parallel()
	rule := policy.Rule{Name: "r", Limit: 1000, Window: time.Minute, Mode: policy.Eventual}
	for _, tc := range []struct {
		mode      policy.FailureMode
		instances int64
		want      int // admitted of 400 one-unit checks
		err       error
	}{
		// cap ⌊0.1·1000/5⌋ = 20 locally, then the share L/N̂ = 250 in all.
		{policy.FailLocal, 4, 250, nil},
		{policy.FailOpen, 4, 400, nil},
		// The cap's 20, then every store check fails closed.
		{policy.FailClosed, 4, 20, apierr.ErrStoreUnavailable},
		// cap ⌊0.1·1000/2⌋ = 50, share 1000.
		{policy.FailLocal, 1, 400, nil},
	} {
		t.Run(fmt.Sprintf("%v/N=%d", tc.mode, tc.instances), func(t *testing.T) {
			t.Parallel()
			c := &clock{t: 1_700_000_000_000_000_000}
			e := newEngine(t, rule, c, tc.mode)
			e.SetFleet(tc.instances, false)
			got := 0
			var lastErr error
			for i := 0; i < 400; i++ {
				d, err := e.Check(context.Background(), "k", 1)
				if err != nil {
					lastErr = err
					require.False(t, d.Allowed)
					continue
				}
				if d.Allowed {
					got++
				}
			}
			assert.Equal(t, tc.want, got)
			if tc.err != nil {
				assert.ErrorIs(t, lastErr, tc.err)
			} else {
				assert.NoError(t, lastErr)
			}
		})
	}
}

// TestStoreDownDecidesByMode: SetFleet with the store down binds at once,
// on the fast path too: FailClosed errors, FailLocal keeps the share.
func TestStoreDownDecidesByMode(t *testing.T) {
	t.Parallel()
	rule := policy.Rule{Name: "r", Limit: 100, Window: time.Minute, Mode: policy.Eventual}
	c := &clock{t: 1_700_000_000_000_000_000}
	closed := newEngine(t, rule, c, policy.FailClosed)
	d, err := closed.Check(context.Background(), "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	closed.SetFleet(2, true)
	_, err = closed.Check(context.Background(), "k", 1)
	require.ErrorIs(t, err, apierr.ErrStoreUnavailable)
	closed.SetFleet(2, false)
	d, err = closed.Check(context.Background(), "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	local := newEngine(t, rule, c, policy.FailLocal)
	local.SetFleet(4, true)
	admitted := 0
	for i := 0; i < 60; i++ {
		if d, err := local.Check(context.Background(), "k", 1); err == nil && d.Allowed {
			admitted++
		}
	}
	require.Equal(t, 25, admitted, "the share L/N̂")
}

// TestRecoveryKeepsOutageShares: back from an outage, a FailLocal rule
// waits with the shares of the fleet it had when the outage began, also when
// the registry it finds was emptied meanwhile (an outage past InstanceTTL)
// and said so while the store was still marked down.
func TestRecoveryKeepsOutageShares(t *testing.T) {
	t.Parallel()
	rule := policy.Rule{Name: "r", Limit: 100, Window: time.Minute, Mode: policy.Eventual}
	for _, tc := range []struct {
		name  string
		fleet [][2]int64 // SetFleet calls after the outage began: instances, down (1)
	}{
		{name: "registry emptied, seen back at once", fleet: [][2]int64{{1, 0}}},
		{name: "registry emptied, seen while down", fleet: [][2]int64{{1, 1}, {1, 0}}},
		{name: "relapse while recovering", fleet: [][2]int64{{1, 0}, {1, 1}, {1, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &clock{t: 1_700_000_000_000_000_000}
			e := newEngine(t, rule, c, policy.FailLocal)
			e.SetFleet(4, false)
			e.SetFleet(4, true)
			for _, f := range tc.fleet {
				e.SetFleet(f[0], f[1] == 1)
			}
			admitted := 0
			for range 60 {
				d, err := e.Check(context.Background(), "k", 1)
				require.NoError(t, err)
				if d.Allowed {
					admitted++
				}
			}
			assert.Equal(t, 25, admitted, "the share of 4 instances, L/4")
		})
	}
}

// TestStrictWithoutStore: a Strict rule whose store is down decides by the
// failure mode, never locally by the cap.
func TestStrictWithoutStore(t *testing.T) {
	t.Parallel()
	rule := policy.Rule{Name: "r", Limit: 10, Window: time.Minute, Mode: policy.Strict}
	c := &clock{t: 1_700_000_000_000_000_000}
	e := newEngine(t, rule, c, policy.FailLocal)
	e.SetFleet(2, true)
	admitted := 0
	for i := 0; i < 20; i++ {
		d, err := e.Check(context.Background(), "k", 1)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		} else {
			require.Positive(t, d.RetryAfter)
		}
	}
	require.Equal(t, 5, admitted, "the share L/N̂ = 10/2")
}

// TestNewRefuses: an engine needs a store for a shared mode, and an
// algorithm it knows.
func TestNewRefuses(t *testing.T) {
	t.Parallel()
	c := &clock{}
	_, err := engine.New(engine.Config{Rule: policy.Rule{Name: "r", Limit: 1, Window: time.Second, Mode: policy.Eventual}, Keys: localcache.NewKeys(1), Now: c.now})
	require.ErrorIs(t, err, policy.ErrInvalidRule)
	_, err = engine.New(engine.Config{Rule: policy.Rule{Name: "r", Limit: 1, Window: time.Second, Algorithm: 99}, Keys: localcache.NewKeys(1), Now: c.now})
	require.ErrorIs(t, err, policy.ErrInvalidRule)
	// A SlidingLog has no Eventual mode, a WarmUp no shared mode, and the
	// shared modes need a store.
	_, err = engine.New(engine.Config{Rule: policy.Rule{Name: "r", Limit: 1, Window: time.Second, Algorithm: policy.SlidingLog, Mode: policy.Eventual}, Keys: localcache.NewKeys(1), Now: c.now})
	require.ErrorIs(t, err, policy.ErrInvalidRule)
	require.ErrorContains(t, err, "supports Mode policy.Local and policy.Strict")
	_, err = engine.New(engine.Config{Rule: policy.Rule{Name: "r", Limit: 1, Window: time.Second, Algorithm: policy.GCRA, WarmUp: time.Second, Mode: policy.Eventual}, Keys: localcache.NewKeys(1), Now: c.now})
	require.ErrorIs(t, err, policy.ErrInvalidRule)
	require.ErrorContains(t, err, "a WarmUp supports only Mode policy.Local")
	for _, a := range []policy.Algorithm{policy.TokenBucket, policy.GCRA, policy.SlidingLog} {
		for _, m := range []policy.Mode{policy.Strict, policy.Eventual} {
			if a == policy.SlidingLog && m == policy.Eventual {
				continue
			}
			_, err = engine.New(engine.Config{Rule: policy.Rule{Name: "r", Limit: 1, Window: time.Second, Algorithm: a, Mode: m}, Keys: localcache.NewKeys(1), Now: c.now})
			require.ErrorIs(t, err, policy.ErrInvalidRule)
			require.ErrorContains(t, err, "needs a store")
		}
	}
}
