package oracle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/record"
	"github.com/sluicehq/sluice/window"
)

// An admission whose decision time is known only modulo a sub-window
// (Early > 0) counts in the fleet's over-admission and own estimate only
// where every candidate time would count it: a late record of a check of
// the first window must not make the next window look over its limit, and
// an admission over the limit wherever it was decided still counts.
func TestAmbiguousAdmissions(t *testing.T) {
	t.Parallel()
	const ms = int64(time.Millisecond)
	p := Params{Geometry: window.NewSliding(time.Second, 10), Limit: 10}
	batch := func(at int64, n int) []record.Record {
		var rs []record.Record
		for i := range n {
			rs = append(rs, rec(at+int64(i), 0, 0, true))
		}
		return rs
	}
	// x is one admission recorded at 250 ms.
	x := func(early uint8) record.Record {
		r := rec(250*ms, 0, 1, true)
		r.Early = early
		return r
	}
	cases := []struct {
		name     string
		first    int // admitted at 0 ms
		early    uint8
		over     float64 // fleet over-admission
		estimate float64 // in the algorithm's own estimate
	}{
		// 9 at 0 ms, x, 10 more at 1150 ms (once the sub-window of the
		// first 9 has left): placed at 250 ms, x shares a window with the
		// last 10; decided as early as 50 ms, it need not.
		{"late record taken at its word", 9, 0, 0.1, 0.1},
		{"late record of a first-window check", 9, 2, 0, 0},
		// 10 at 0 ms and x: x is over the limit wherever it was decided.
		{"over the limit at every candidate time", 10, 2, 0.1, 0.1},
		{"over the limit, certain time", 10, 0, 0.1, 0.1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rs := append(batch(0, c.first), x(c.early))
			rs = append(rs, batch(1150*ms, 10)...)
			s := Analyze(rs, p).Summary
			require.InDelta(t, c.over, s.OverMax, 1e-9, "over-admission")
			require.InDelta(t, c.estimate, s.EstimateOverMax, 1e-9, "own estimate")
			require.Equal(t, int64(c.first+11), s.Admitted)
		})
	}
}
