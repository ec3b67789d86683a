package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/syncer"
)

// TestEventualBucketClockBehindStore: an Eventual bucket's instance whose
// estimate of the store's clock trails it (the offset is measured within
// half a round trip) takes a bucket of 2 a minute down to its last unit,
// then checks again at once: the store admits that check. The local "denied
// for sure" test reads the store's clock as at least the time of the last
// answer, so it does not deny it on the lagging estimate (it did, with a
// RetryAfter of the lag).
func TestEventualBucketClockBehindStore(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	s, err := syncer.New(syncer.Config{Client: client, Prefix: "t", InstanceID: "i", Interval: time.Hour, Timeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	require.NoError(t, s.Start(context.Background()))
	lag := int64(20 * time.Millisecond)
	now := func() int64 { return s.Now() - lag }
	e, err := engine.New(engine.Config{
		Rule:         policy.Rule{Name: "bucket", Limit: 2, Window: time.Minute, Algorithm: policy.GCRA, Mode: policy.Eventual},
		Keys:         localcache.NewKeys(1000),
		Now:          now,
		ErrorBudget:  0.001,
		FailureMode:  policy.FailLocal,
		SyncInterval: time.Hour,
		Store:        s.Rules(),
	})
	require.NoError(t, err)
	for i := range 2 {
		r, err := e.Check(context.Background(), "k", 1)
		require.NoError(t, err)
		assert.True(t, r.Allowed, "check %d of a bucket of 2", i)
	}
	r, err := e.Check(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.False(t, r.Allowed, "the third")
	assert.Greater(t, r.RetryAfter, 29*time.Second, "until the next unit, about 30 s")
}

// TestEventualBucketOutage: an Eventual bucket on its failure mode
// (FailLocal, one instance) admits what the store's bucket held at its last
// answer, refilled since, not a full bucket; and once the store answers
// again, restarted empty, it is charged what the failure mode admitted, so
// that the units it refilled meanwhile are not spent twice. Over the whole
// run the instance admits at most Store + Pool + r·τ, what one exact bucket
// admits plus the error budget (window.SplitBucket): 110 and a unit per
// second elapsed here. Without the floor the outage admits a whole Burst
// again (about 140 in all); without the charge, the store restarted empty
// hands out the outage's admissions again (about 160).
func TestEventualBucketOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// Heartbeats every 20 ms tell when the store is back.
	s, err := syncer.New(syncer.Config{Client: srv.Client(t), Prefix: "t", InstanceID: "i", Interval: 20 * time.Millisecond, Timeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	require.NoError(t, s.Start(context.Background()))
	e, err := engine.New(engine.Config{
		Rule:         policy.Rule{Name: "bucket", Limit: 100, Window: 100 * time.Second, Algorithm: policy.TokenBucket, Mode: policy.Eventual},
		Keys:         localcache.NewKeys(1000),
		Now:          s.Now,
		ErrorBudget:  0.1,
		FailureMode:  policy.FailLocal,
		SyncInterval: time.Hour,
		Store:        s.Rules(),
	})
	require.NoError(t, err)
	start := time.Now()
	admit := func(most int) int {
		n := 0
		for range most {
			r, err := e.Check(context.Background(), "k", 1)
			require.NoError(t, err)
			if !r.Allowed {
				break
			}
			n++
		}
		return n
	}
	require.Equal(t, 40, admit(40), "the store admits 40 of 100")
	srv.Kill()
	down := admit(200)
	srv.Restart()
	require.Eventually(t, func() bool { return s.Watch().Fleet().Healthy }, 10*time.Second, 5*time.Millisecond, "the store back")
	back := admit(200)
	most := 110 + int(time.Since(start)/time.Second) + 1
	t.Logf("before 40, on the failure mode %d, the store back %d", down, back)
	assert.LessOrEqual(t, down, 60+most-110, "the failure mode starts from the store's bucket")
	assert.LessOrEqual(t, 40+down+back, most, "Store + Pool + r·τ over the run")
}
