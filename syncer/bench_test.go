package syncer

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/localcache"
)

// BenchmarkSyncPerKey times one pipeline of per-key calls (syncScript), the
// path of reservations, early syncs and leases, on 1, 16 and 256 keys that
// each admitted once since their last call. ns/op, B/op and allocs/op are
// per pipeline (divide by keys for one key-sync's), admissions included;
// redis-us/call is the Redis CPU of one call (INFO commandstats). The
// others=7,lease case is a lease request on hashes that also hold seven
// other instances' bookkeeping (a sequence number and a lease record each),
// as at eight instances. The syncer's loop is not started: the benchmark is
// its only caller.
func BenchmarkSyncPerKey(b *testing.B) {
	for _, bc := range []struct {
		name         string
		keys, others int
		lease        bool
	}{
		{"keys=1", 1, 0, false},
		{"keys=16", 16, 0, false},
		{"keys=256", 256, 0, false},
		{"keys=16,others=7,lease", 16, 7, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := redistest.Start(b).Client(b)
			geo := midGeometry(10)
			tab, err := localcache.New(localcache.Config{Geometry: geo, Limit: 1 << 30, Eventual: true, Keys: localcache.NewKeys(1000)})
			if err != nil {
				b.Fatal(err)
			}
			tab.Control().SetLimits(tableport.Limits{Cap: 1 << 29, Share: 1 << 30})
			r := &testRule{Table: tab, cfg: syncport.RuleConfig{Name: "api", Geometry: geo, Limit: 1 << 30, Keys: tab.SyncKeys(), Leases: bc.lease}}
			s, err := newSyncer(testConfig(c, "a"), r)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			nowUs, err := c.Time(ctx).Result()
			if err != nil {
				b.Fatal(err)
			}
			k := geo.Index(s.Now())
			items := make([]item, bc.keys)
			for i := range items {
				key := "k" + strconv.Itoa(i)
				if v := tab.AllowAt(key, s.Now(), 1); v.Status != verdict.Allowed {
					b.Fatalf("admission of %q: %v", key, v.Status)
				}
				ref, ok := tab.Control().Ref(key)
				if !ok {
					b.Fatalf("no entry for %q", key)
				}
				items[i] = item{id: keyID{rule: r.windowRule, key: key}, ref: ref, lease: bc.lease}
				for o := range bc.others {
					seq := strconv.FormatInt(nowUs.UnixMicro()-int64(o), 10)
					id := "o" + strconv.Itoa(o)
					rec := seq + "::" + strconv.FormatInt(k, 10) + ":3:" + strconv.FormatInt(k, 10)
					if err := c.HSet(ctx, r.keyName(key), "i:"+id, seq, "r"+seq+":"+id, rec).Err(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := s.syncPerKey(ctx, items); err != nil { // loads the script (NOSCRIPT)
				b.Fatal(err)
			}
			calls0, us0 := evalshaStats(b, c)
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
			calls, us := evalshaStats(b, c)
			if calls > calls0 {
				b.ReportMetric(float64(us-us0)/float64(calls-calls0), "redis-us/call")
			}
		})
	}
}

var evalshaStat = regexp.MustCompile(`cmdstat_evalsha:calls=(\d+),usec=(\d+)`)

// evalshaStats returns the calls and µs of CPU of EVALSHA so far (INFO
// commandstats).
func evalshaStats(b *testing.B, c redis.UniversalClient) (calls, us int64) {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	m := evalshaStat.FindStringSubmatch(info)
	if m == nil {
		return 0, 0
	}
	calls, _ = strconv.ParseInt(m[1], 10, 64)
	us, _ = strconv.ParseInt(m[2], 10, 64)
	return calls, us
}
