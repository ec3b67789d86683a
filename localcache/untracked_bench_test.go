package localcache

import (
	"fmt"
	"testing"
	"time"
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

// BenchmarkKeyTableUntracked is a check of a key a KeyTable does not track,
// decided on the table's sketch: on a bound that is filling (past the
// high-water mark: the admission rule counts a sighting) or full (refused
// at once). The time advances by one interval of the rule every 16 checks.
func BenchmarkKeyTableUntracked(b *testing.B) {
	keys := make([]string, 1<<14)
	for i := range keys {
		keys[i] = fmt.Sprintf("stranger:%08d", i)
	}
	for _, fill := range []struct {
		name string
		n    int64 // tracked keys of a bound of 1000
	}{{"filling", 700}, {"full", 1000}} {
		for name, tb := range benchKeyTables(b) {
			b.Run(name+"/"+fill.name, func(b *testing.B) {
				k, _ := keysOf(tb, "")
				old := k.n.Load()
				k.n.Store(fill.n * k.max / 1000) // as if that many keys were tracked
				b.Cleanup(func() { k.n.Store(old) })
				now := base
				tb.Allow("first", now, 1) // allocates the sketch
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if i&15 == 0 {
						now += int64(time.Millisecond)
					}
					tb.Allow(keys[i&(len(keys)-1)], now, 1)
					i++
				}
			})
		}
	}
}
