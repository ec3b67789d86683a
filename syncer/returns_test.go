package syncer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
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
	require.True(t, s.returns(r.windowRule))
	// The other instances admitted 450 in the bucket before: with the lease
	// the key is near its limit (half of it or more), where the returns
	// matter and a key cannot leave them for a later cycle.
	name := r.keyName("k")
	require.NoError(t, c.HIncrBy(ctxT(t, opTimeout), name, itoa(k-1), 450).Err())
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
	r.Table.Control().Tick(s.Now()) // as the limiter's ticker does every millisecond: a lease ends once the published time has left its bucket
	require.Eventually(t, func() bool { return buckets(t, c, name)[k] == 8 }, 5*time.Second, time.Millisecond,
		"bucket k holds what the key admitted in it once its lease is given back (%d with the grant)", granted)
	assert.Positive(t, s.Stats().Corrections)
	assert.Less(t, geo.Index(s.Now()), k+2, "given back within the bucket after k")
}
