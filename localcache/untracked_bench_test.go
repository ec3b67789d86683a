package localcache

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rawmem"
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
			tb.tick(base)
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
// at once). Every check is of a new key (written into a reused buffer, as
// a caller's key may be), so that practically none gets in; the time
// advances by a millisecond every 16 checks.
func BenchmarkKeyTableUntracked(b *testing.B) {
	for _, fill := range []struct {
		name string
		n    int64 // tracked keys of a bound of 1000
	}{{"filling", 700}, {"full", 1000}} {
		for _, name := range []string{"gcra", "warmup", "log"} {
			b.Run(name+"/"+fill.name, func(b *testing.B) {
				tb := benchKeyTables(b)[name]
				k, _ := keysOf(tb, "")
				k.n.Store(fill.n * k.max / 1000) // as if that many keys were tracked
				now := base
				tb.Allow("first", now, 1) // allocates the sketch
				buf := []byte("stranger:0000000000")
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if i&15 == 0 {
						now += int64(time.Millisecond)
					}
					strconv.AppendInt(buf[:9], int64(i), 10)
					tb.Allow(rawmem.String(buf), now, 1) // Allow keeps no reference to its key
					i++
				}
				// Filling, a key used once gets in only if its counters all
				// hold other keys' sightings: rarely.
				if t := sizeOf(tb); t > 1+i/1000 {
					b.Fatalf("%d keys of %d got in", t, i)
				}
			})
		}
	}
}
