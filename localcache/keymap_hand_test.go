//go:build !sluice_xsyncmap

package localcache

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of the hand-written map's own mechanism (keymap.go): its table's
// growth and shrinking, and its one lock. keymap_test.go's tests hold for
// both maps (go test -tags sluice_xsyncmap runs them on the xsync one).

// TestKeyMapGrowAndShrink: a map grows as keys come and shrinks as they go,
// keeping every key it holds.
func TestKeyMapGrowAndShrink(t *testing.T) {
	t.Parallel()
	_, alloc := entryAllocator(2, true)
	m := newKeyMap()
	keys := kmKeys(20000)
	for _, k := range keys {
		_, inserted := m.LoadOrInsert(k, func() *hdr { return alloc(k) })
		require.True(t, inserted)
	}
	big := len(m.t.Load().buckets)
	assert.GreaterOrEqual(t, big*kmSlots*3, len(keys)*4, "at most three quarters used")
	for _, k := range keys[100:] {
		m.Delete(k, m.Load(k))
	}
	assert.Less(t, len(m.t.Load().buckets), big/16, "shrunk")
	assert.Equal(t, 100, m.Len())
	for i, k := range keys {
		assert.Equal(t, i < 100, m.Load(k) != nil, "key %d", i)
	}
}

// TestKeyMapBuildsOutsideTheLock: LoadOrInsert builds the new entry before
// it takes the map's lock (Replace takes one built by its caller), so that
// an allocation (and the garbage collector's work charged to it) does not
// hold up other insertions.
func TestKeyMapBuildsOutsideTheLock(t *testing.T) {
	t.Parallel()
	_, alloc := entryAllocator(2, true)
	m := newKeyMap()
	unlocked := func(key string) func() *hdr {
		return func() *hdr {
			if assert.True(t, m.mu.TryLock(), "the map's lock is held while the entry of %q is built", key) {
				m.mu.Unlock()
			}
			return alloc(key)
		}
	}
	e, inserted := m.LoadOrInsert("a", unlocked("a"))
	require.True(t, inserted)
	assert.True(t, m.Replace("a", e, unlocked("a")()))
	assert.True(t, m.Replace("b", nil, unlocked("b")()), "a key without an entry gets one")
	assert.Equal(t, 2, m.Len())
}
