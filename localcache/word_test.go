package localcache

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestWordVersion: a bump changes a pend word's version alone, wrapping
// within its four bits; a new count keeps the tag and the version; counts
// read through the version.
func TestWordVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		tag, count int64
		bumps      int
	}{
		{"fresh", 7, 0, 1},
		{"counted", 7, 12345, 3},
		{"largest tag and count", tagMask, maxCount, 1},
		{"wraps after sixteen", 3, 9, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := pack(tc.tag, tc.count)
			b := w
			for range tc.bumps {
				b = bumped(b)
			}
			assert.Equal(t, tc.tag, tagOf(b))
			assert.Equal(t, tc.count, countOf(b))
			assert.Equal(t, tc.bumps%16 == 0, b == w, "the word changes unless the version wrapped")
			c := withCount(b, tc.count/2)
			assert.Equal(t, tc.count/2, countOf(c))
			assert.Equal(t, b&verMask, c&verMask, "withCount keeps the version")
			assert.Equal(t, tc.tag, tagOf(c))
			assert.Equal(t, tc.count, countAt(b, tc.tag))
		})
	}
}
