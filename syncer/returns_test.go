package syncer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/window"
)

// TestReturnPass: with a sync interval longer than a sub-window (an hour
// here), the units a lease of bucket k did not use are given back to the
// store right after k ends, with no sync cycle: the store's total of k falls
// to what the key admitted in it. Before, they stayed counted until the
// next cycle, and at an interval as long as the window the other instances'
// checks of a key below its limit were denied meanwhile.
func TestReturnPass(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	geo, r, s, k := leasing(t, c)
	require.True(t, s.returns(r.Rule))
	// The other instances admitted 300 in the bucket before: with the lease
	// the key is near its limit (half of it or more), where the returns
	// matter and a key cannot leave them for a later cycle.
	name := r.KeyName("k")
	require.NoError(t, c.HIncrBy(ctxT(t, opTimeout), name, itoa(k-1), 300).Err())
	busy(t, s, r, "k")
	admit(t, s, r, "k", 5) // the fifth asks for an early sync, which brings a lease
	require.Eventually(t, func() bool { return s.Stats().EarlySyncs == 1 }, 5*time.Second, time.Millisecond)
	var granted int64
	require.Eventually(t, func() bool {
		granted = buckets(t, c, name)[k]
		return granted > 10
	}, 5*time.Second, time.Millisecond, "the store counts the lease in bucket k")
	admit(t, s, r, "k", 3) // on the lease: most of it stays unused
	for geo.Index(s.Now()) == k {
		time.Sleep(time.Millisecond)
	}
	r.Table.Tick(s.Now()) // as the limiter's ticker does every millisecond: a lease ends once the published time has left its bucket
	require.Eventually(t, func() bool { return buckets(t, c, name)[k] == 8 }, 5*time.Second, time.Millisecond,
		"bucket k holds what the key admitted in it once its lease is given back (%d with the grant)", granted)
	assert.Positive(t, s.Stats().Corrections)
	assert.Less(t, geo.Index(s.Now()), k+2, "given back within the bucket after k")
}

// TestIdleLeaseReturned: a lease of the current bucket that no check used for
// a sync cycle ends at the next one, in the middle of its bucket, and the
// units it did not use go back to the store at once, although the key needs
// no sync of its own (far from its limit and its cap): its traffic may have
// moved to another instance, whose checks those units would deny. The
// store's total of the bucket falls to what the key admitted in it; a key
// whose checks go on keeps its lease.
func TestIdleLeaseReturned(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	geo := window.NewSliding(8*time.Second, 4) // 2 s buckets: many cycles each
	r := newRule(t, "api", geo, 1000, 10)
	r.cfg.Leases = true
	cfg := testConfig(c, "A")
	cfg.Interval = 20 * time.Millisecond
	s := startSyncer(t, cfg, r)
	for geo.Phase(s.Now()) > 0.25 {
		time.Sleep(10 * time.Millisecond)
	}
	k := geo.Index(s.Now())
	for _, key := range []string{"idle", "busy"} {
		busy(t, s, r, key)
		admit(t, s, r, key, 5) // the fifth asks for an early sync, which brings a lease
	}
	leased := func(key string) int64 {
		ref, ok := r.Table.Ref(key)
		require.True(t, ok)
		return r.Table.LeaseLeft(ref, k)
	}
	require.Eventually(t, func() bool { return leased("idle") > 3 && leased("busy") > 3 }, 5*time.Second, time.Millisecond, "both hold a lease")
	admit(t, s, r, "idle", 3) // on the lease: most of it stays unused
	granted := buckets(t, c, r.KeyName("idle"))[k]
	require.Greater(t, granted, int64(8), "the store counts the grant")

	stop := time.Now().Add(300 * time.Millisecond) // many cycles, well inside bucket k
	for time.Now().Before(stop) {
		r.Table.Tick(s.Now())
		admit(t, s, r, "busy", 1)
		time.Sleep(2 * time.Millisecond)
		if leased("busy") == 0 {
			break // used up: it asks for more, and may wait a moment for it
		}
	}
	require.Equal(t, k, geo.Index(s.Now()), "harness: still in bucket k")
	require.Eventually(t, func() bool { return buckets(t, c, r.KeyName("idle"))[k] == 8 }, 5*time.Second, time.Millisecond,
		"bucket k holds what the idle key admitted once its lease is given back (%d with the grant)", granted)
	assert.Zero(t, leased("idle"), "its lease ended")
	assert.Positive(t, leased("busy"), "a key whose checks go on keeps its lease")
	assert.Equal(t, k, geo.Index(s.Now()), "given back within the bucket")
}
