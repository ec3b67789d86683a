package syncer

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestOffsetFilter(t *testing.T) {
	t.Parallel()
	var f offsetFilter
	assert.Equal(t, int64(100), f.sample(100, 50), "first sample")
	assert.Equal(t, int64(100), f.sample(400, 900), "a slower round trip does not move it")
	assert.Equal(t, int64(120), f.sample(120, 10), "a faster one does")
	for range 7 {
		assert.Equal(t, int64(120), f.sample(-5000, 2000))
	}
	// The fast sample has left the window of eight: the clock stepped.
	assert.Equal(t, int64(-5000), f.sample(-5000, 2000))
}
