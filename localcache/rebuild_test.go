package localcache

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestViewAndLeased: View is the window as last pulled; Leased is the instance's own leases that no pull has counted: the next
// bucket's, and the current one's once it has started, until a pull during
// it brings its total.
func TestViewAndLeased(t *testing.T) {
	t.Parallel()
	tb, geo, s, t0, r := leasedKey(t, 100, 2)
	k0 := geo.Index(t0)
	first := oldest(geo, k0)
	assert.Empty(t, tb.syncView().View(r, t0, nil), "never pulled")
	assert.Empty(t, tb.syncView().Leased(r, t0, nil))
	assert.Empty(t, tb.syncView().Viewed(nil, t0))

	grant(tb, geo, s, r, t0, 5)
	s.add("k", k0+1, 6)
	tb.syncView().Settle(r, t0, nil, first, s.push("k", nil, first, geo.Span()), Bucket{Index: k0 + 1, Count: 6})
	assert.Equal(t, []Bucket{{Index: k0, Count: 1 + 5}}, tb.syncView().View(r, t0, nil), "the admission and the grant, as pulled")
	assert.Equal(t, []Bucket{{Index: k0 + 1, Count: 6}}, tb.syncView().Leased(r, t0, nil), "the lease of the next bucket: no pull has counted it there")
	require.Len(t, tb.syncView().Viewed(nil, t0), 1)

	t1 := bucketStart(geo, 1)
	tb.tick(t1)
	_, done := tb.syncView().Release(r, k0, t1, false)
	require.True(t, done)
	assert.Equal(t, []Bucket{{Index: k0, Count: 1 + 5}}, tb.syncView().View(r, t1, nil))
	assert.Equal(t, []Bucket{{Index: k0 + 1, Count: 6}}, tb.syncView().Leased(r, t1, nil), "its bucket started, no pull of it yet")

	syncRef(tb, geo, s, r, t1)
	assert.Equal(t, []Bucket{{Index: k0 + 1, Count: 6}, {Index: k0, Count: 1 + 5}}, tb.syncView().View(r, t1, nil), "a pull during it counts the lease in its own bucket")
	assert.Empty(t, tb.syncView().Leased(r, t1, nil), "then the view holds it")
}
