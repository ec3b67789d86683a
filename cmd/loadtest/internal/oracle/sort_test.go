package oracle

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/record"
)

// sortRecords orders records as a comparison sort by key, time and instance
// does, by radix when the composite fits 64 bits and by comparison when not.
func TestSortRecords(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		n     int
		keys  uint32
		span  int64 // times in [base, base+span)
		insts uint16
	}{
		{"small, comparison sort", radixMin - 1, 20, 2e9, 4},
		{"throughput-like", 5 * radixMin, 20, 2e9, 4},
		{"many keys, equal times", 3 * radixMin, 1000, 3, 64},
		{"one key, one instance", 2 * radixMin, 1, 1e9, 1},
		{"too wide for 64 bits", 2 * radixMin, 1 << 24, 1 << 50, 256},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(c.n), uint64(c.keys)))
			base := int64(1_700_000_000) * 1e9
			recs := make([]record.Record, c.n)
			for i := range recs {
				recs[i] = record.Record{T: base + rng.Int64N(c.span), Key: rng.Uint32N(c.keys), Cost: uint32(i), Inst: uint16(rng.UintN(uint(c.insts)))}
			}
			want := slices.Clone(recs)
			slices.SortStableFunc(want, compareRecords)
			sortRecords(recs)
			require.Equal(t, want, recs)
		})
	}
}
