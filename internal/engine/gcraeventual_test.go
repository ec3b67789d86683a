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
	now := func() int64 { return time.Now().UnixNano() + int64(s.Offset()) - lag }
	e, err := engine.New(engine.Config{
		Rule:         policy.Rule{Name: "bucket", Limit: 2, Window: time.Minute, Algorithm: policy.GCRA, Mode: policy.Eventual},
		Keys:         localcache.NewKeys(1000),
		Now:          now,
		ErrorBudget:  0.001,
		FailureMode:  policy.FailLocal,
		SyncInterval: time.Hour,
		Store:        s,
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
