package syncer

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/localcache"
)

// BenchmarkSyncPerKey times one pipeline of per-key calls (syncScript), the
// path of reservations, early syncs and leases, on 1, 16 and 256 keys that
// each admitted once since their last call. ns/op, B/op and allocs/op are
// per pipeline (divide by keys for one key-sync's), admissions included.
// The syncer's loop is not started: the benchmark is its only caller.
func BenchmarkSyncPerKey(b *testing.B) {
	for _, keys := range []int{1, 16, 256} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			c := redistest.Start(b).Client(b)
			geo := midGeometry(10)
			tab, err := localcache.New(localcache.Config{Geometry: geo, Limit: 1 << 30, Eventual: true, Keys: localcache.NewKeys(1000)})
			if err != nil {
				b.Fatal(err)
			}
			tab.SetLimits(localcache.Limits{Cap: 1 << 29, Share: 1 << 30})
			r := &testRule{Table: tab, cfg: RuleConfig{Name: "api", Geometry: geo, Limit: 1 << 30, Keys: tab}}
			s, err := newSyncer(testConfig(c, "a"), r)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			items := make([]item, keys)
			for i := range items {
				key := "k" + strconv.Itoa(i)
				if v := tab.AllowAt(key, s.Now(), 1); v.Status != localcache.Allowed {
					b.Fatalf("admission of %q: %v", key, v.Status)
				}
				ref, ok := tab.Ref(key)
				if !ok {
					b.Fatalf("no entry for %q", key)
				}
				items[i] = item{id: keyID{rule: r.Rule, key: key}, ref: ref}
			}
			if err := s.syncPerKey(ctx, items); err != nil { // loads the script (NOSCRIPT)
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				now := s.Now()
				for i := range items {
					tab.AllowAt(items[i].id.key, now, 1)
				}
				if err := s.syncPerKey(ctx, items); err != nil {
					b.Fatal(err)
				}
				s.prev = s.prev[:0]
			}
		})
	}
}
