package localcache

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/window"
)

// base is a fixed store time (2027-01-15) that every test starts from, so
// that runs are deterministic.
var base = int64(1_800_000_000) * int64(time.Second)

// bucketStart returns the first nanosecond of the bucket after the one holding
// base plus off buckets: a bucket-aligned time to build streams on.
func bucketStart(geo window.Sliding, off int64) int64 {
	return (geo.Index(base) + 1 + off) * geo.Sub()
}

// mkTable returns a table for geo and limit with its own key bound.
func mkTable(t testing.TB, geo window.Sliding, limit int64, eventual bool) *Table {
	t.Helper()
	tb, err := New(Config{Geometry: geo, Limit: limit, Eventual: eventual, ByNeed: eventual, Keys: NewKeys(1 << 20)})
	require.NoError(t, err)
	return tb
}

// pendingSum returns the sum of r's pending counts at now.
func pendingSum(tb *Table, r verdict.Ref, now int64) int64 {
	var s int64
	for _, b := range tb.syncView().Pending(r, now, nil) {
		s += b.Count
	}
	return s
}

// ownCount returns Estimate's own count for key (0 if untracked).
func ownCount(tb *Table, key string, now int64) int64 {
	_, own, _ := tb.estimate(key, now)
	return own
}

// admitUntil checks cost 1 for key at now until a check is not Allowed and
// returns how many passed and the verdict that stopped it.
func admitUntil(t *testing.T, tb *Table, key string, now int64, max int) (int64, verdict.Verdict) {
	t.Helper()
	for i := 0; i < max; i++ {
		if v := tb.AllowAt(key, now, 1); v.Status != verdict.Allowed {
			return int64(i), v
		}
	}
	t.Fatalf("%s: still admitting after %d", key, max)
	return 0, verdict.Verdict{}
}

// fakeStore is the store side of a simulated syncer: per key, the fleet-wide
// count of each bucket.
type fakeStore struct {
	mu     sync.Mutex
	counts map[string]map[int64]int64
}

func newFakeStore() *fakeStore { return &fakeStore{counts: map[string]map[int64]int64{}} }

// add counts n in bucket j of key, as another instance would.
func (s *fakeStore) add(key string, j, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.counts[key]
	if m == nil {
		m = map[int64]int64{}
		s.counts[key] = m
	}
	m[j] += n
}

// push adds buckets to key and returns the totals of the span buckets from
// first, as the store's script would reply.
func (s *fakeStore) push(key string, pend []Bucket, first int64, span int) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.counts[key]
	if m == nil {
		m = map[int64]int64{}
		s.counts[key] = m
	}
	for _, b := range pend {
		m[b.Index] += b.Count
	}
	totals := make([]int64, span)
	for i := range totals {
		totals[i] = m[first+int64(i)]
	}
	return totals
}

// oldest returns the oldest bucket of geo that still counts at bucket k.
func oldest(geo window.Sliding, k int64) int64 { return k - int64(geo.Span()) + 1 }

// syncRef does for one key what the syncer does: read its pending counts,
// push them, and settle with the store's totals. It returns what it acked.
func syncRef(tb *Table, geo window.Sliding, s *fakeStore, r verdict.Ref, now int64) int64 {
	pend := tb.syncView().Pending(r, now, nil)
	first := oldest(geo, geo.Index(now))
	totals := s.push(tb.syncView().Key(r), pend, first, geo.Span())
	tb.syncView().Settle(r, now, pend, first, totals, Bucket{})
	var acked int64
	for _, b := range pend {
		acked += b.Count
	}
	return acked
}

// syncAll does what a Flush does: it drains tb and syncs every drained key
// and every parked key with unacknowledged counts (a new key is born
// parked); it returns the units acked.
func syncAll(tb *Table, geo window.Sliding, s *fakeStore, now int64) int64 {
	var acked int64
	seen := map[verdict.Ref]bool{}
	for _, r := range tb.syncView().Unsynced(tb.syncView().Drain(nil), now) {
		if !seen[r] {
			seen[r] = true
			acked += syncRef(tb, geo, s, r, now)
		}
	}
	return acked
}

// wantRemaining is floor(L − E) clamped at 0, E the reference estimate.
func wantRemaining(limit int64, est float64) int64 {
	return max(int64(math.Floor(float64(limit)-est)), 0)
}

// mustTable returns a table for cfg or fails the test.
func mustTable(t testing.TB, cfg Config) *Table {
	t.Helper()
	tb, err := New(cfg)
	require.NoError(t, err)
	return tb
}

// tracked reports whether key has an entry in tb (the admission rule let it
// in).
func tracked(tb *Table, key string) bool {
	return tb.m.Load(key) != nil
}
