package lat

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestOf(t *testing.T) {
	t.Parallel()
	many := make([]uint32, 1000)
	for i := range many {
		many[i] = uint32(1000 - i) // 1000 … 1 ns, unsorted
	}
	many[0] = uint32(Slow) // one sample exactly at Slow
	for _, c := range []struct {
		name string
		xs   []uint32
		want Quantiles
	}{
		{"empty", nil, Quantiles{}},
		{"one", []uint32{7}, Quantiles{N: 1, P50: 7, P99: 7, P999: 7, Max: 7}},
		{"two", []uint32{9, 1}, Quantiles{N: 2, P50: 1, P99: 9, P999: 9, Max: 9}},
		// 999 samples 1…999 ns and one at Slow: nearest rank.
		{"thousand", many, Quantiles{N: 1000, P50: 500, P99: 990, P999: 999, Max: Slow, Slow: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, c.want, Of(c.xs))
		})
	}
}

func TestSlowBelowRoundTrip(t *testing.T) {
	t.Parallel()
	q := Of([]uint32{uint32(Slow - time.Nanosecond), uint32(Slow), uint32(2 * Slow)})
	assert.Equal(t, 2, q.Slow, "samples at or above Slow")
}
