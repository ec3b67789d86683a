package window_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/window"
)

// TestResetAt: the window is whole again when its newest bucket holding a
// count leaves it, whatever the time of the question, and at once if it
// holds none; an admission's ResetAfter is ResetAt with a count now.
func TestResetAt(t *testing.T) {
	t.Parallel()
	const sub = int64(time.Second)
	for _, tc := range []struct {
		name   string
		geo    window.Sliding
		counts map[int64]int64 // bucket → count
		at     int64
		want   time.Duration
	}{
		{"sliding: newest bucket 12 leaves at 12+10+1", window.NewSliding(10*time.Second, 10), map[int64]int64{10: 3, 12: 1}, 15*sub + 1, time.Duration(23*sub - 15*sub - 1)},
		{"sliding: asked later, same instant", window.NewSliding(10*time.Second, 10), map[int64]int64{10: 3, 12: 1}, 21 * sub, time.Duration(2 * sub)},
		{"weighted: as sliding", window.NewWeighted(10*time.Second, 10), map[int64]int64{12: 1}, 20*sub + 5, time.Duration(3*sub - 5)},
		{"sliding: nothing in the window", window.NewSliding(10*time.Second, 10), map[int64]int64{1: 5}, 30 * sub, 0},
		{"fixed: the window's end", window.NewFixed(10 * time.Second), map[int64]int64{3: 2}, 35 * sub, 5 * time.Second},
		{"fixed: the window holds nothing", window.NewFixed(10 * time.Second), map[int64]int64{2: 2}, 35 * sub, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			count := func(j int64) int64 { return tc.counts[j] }
			require.Equal(t, tc.want, tc.geo.ResetAt(tc.at, count))
			now := map[int64]int64{tc.geo.Index(tc.at): 1}
			require.Equal(t, tc.geo.ResetAfter(tc.at), tc.geo.ResetAt(tc.at, func(j int64) int64 { return now[j] }))
		})
	}
}
