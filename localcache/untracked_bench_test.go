package localcache

import (
	"fmt"
	"testing"
)

// BenchmarkAllowUntracked is a check of a key the table does not track, on
// a table whose bound is filling (past the high-water mark: the admission
// rule counts a sighting) or full (refused at once): an Eventual table only
// says Untracked (the store decides), a Local one decides on its sketch.
func BenchmarkAllowUntracked(b *testing.B) {
	keys := make([]string, 1<<14)
	for i := range keys {
		keys[i] = fmt.Sprintf("stranger:%08d", i)
	}
	for _, tc := range []struct {
		name     string
		eventual bool
		fill     int64 // tracked keys of a bound of 1000
	}{
		{"eventual/filling", true, 700},
		{"local/filling", false, 700},
		{"local/full", false, 1000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tb := mustTable(b, Config{Geometry: benchGeo, Limit: 1 << 30, Eventual: tc.eventual, Keys: NewKeys(1000)})
			tb.Tick(base)
			tb.keys.n.Store(tc.fill) // as if that many keys were tracked
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				tb.Allow(keys[i&(len(keys)-1)], 1)
				i++
			}
		})
	}
}
