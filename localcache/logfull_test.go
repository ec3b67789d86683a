package localcache

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/stretchr/testify/require"
)

// TestLogTableFullDenial: a full log's denial is remembered, and the
// denials decided on it without the lock carry the exact fields; a refund
// or the oldest unit's leaving makes room again at once.
func TestLogTableFullDenial(t *testing.T) {
	t.Parallel()
	const w = int64(time.Second)
	tb, err := NewLogTable(time.Second, 3, NewKeys(10))
	require.NoError(t, err)
	for i := range int64(3) {
		require.True(t, tb.Allow("k", base+i, 1).Allowed)
	}
	first := tb.Allow("k", base+10, 1) // decided under the lock: remembers it
	require.Equal(t, verdict.Outcome{ResetAfter: time.Duration(base + 2 + w - (base + 10)), RetryAfter: time.Duration(base + w - (base + 10))}, first)
	for _, at := range []int64{base + 20, base + w - 1} {
		require.Equal(t, verdict.Outcome{ResetAfter: time.Duration(base + 2 + w - at), RetryAfter: time.Duration(base + w - at)}, tb.Allow("k", at, 1), "at %d", at-base)
	}
	require.True(t, tb.Allow("k", base+w, 1).Allowed, "the oldest unit has left")
	require.False(t, tb.Allow("k", base+w, 1).Allowed) // full again: remembered
	require.False(t, tb.Allow("k", base+w, 1).Allowed)
	require.Equal(t, int64(1), tb.Refund("k", base+w, 1))
	require.True(t, tb.Allow("k", base+w, 1).Allowed, "a refund makes room at once")
}
