package logbuf

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestBufferConcurrent: writes from several goroutines all land, whole,
// while another goroutine reads.
func TestBufferConcurrent(t *testing.T) {
	t.Parallel()
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("line\n"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 400, strings.Count(b.String(), "line\n"))
}
