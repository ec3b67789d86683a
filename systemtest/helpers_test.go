package systemtest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// fleet starts n limiters sharing client, closed at cleanup.
func fleet(t *testing.T, n int, client func() redis.UniversalClient, opts sluice.Options, rules ...policy.Rule) []*sluice.Limiter {
	t.Helper()
	ls := make([]*sluice.Limiter, n)
	for i := range ls {
		o := opts
		o.Redis = client()
		l, err := sluice.New(o, rules...)
		require.NoError(t, err)
		ls[i] = l
		t.Cleanup(func() { _ = l.Close() })
	}
	// Every instance has heartbeated at least once after all registered.
	flushAll(t, ls)
	return ls
}

func flushAll(t *testing.T, ls []*sluice.Limiter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range ls {
		require.NoError(t, l.Flush(ctx))
	}
}

// closeAll closes every limiter of ls. A test that compares what the store
// holds with what was admitted reads the store after it, not after a Flush:
// a Flush ends every lease an instance holds, but the limiter goes on
// syncing, and a lease-ahead pass near the end of a sub-window grants a key
// that was busy in the window units of the next bucket, which the store
// counts at once. Close's flush ends the leases and nothing syncs after it.
func closeAll(t *testing.T, ls []*sluice.Limiter) {
	t.Helper()
	for _, l := range ls {
		require.NoError(t, l.Close())
	}
}

// buckets returns the per-bucket totals Redis holds for a limiter key.
func buckets(t *testing.T, c redis.UniversalClient, prefix, rule, key string, sub time.Duration) map[int64]int64 {
	t.Helper()
	name := prefix + ":{" + rule + ":" + key + "}:" + strconv.FormatInt(sub.Microseconds(), 10)
	h, err := c.HGetAll(context.Background(), name).Result()
	require.NoError(t, err)
	out := map[int64]int64{}
	for f, v := range h {
		if strings.Contains(f, ":") {
			continue
		}
		f = strings.TrimPrefix(f, "v") // a count restored after a loss adds to its bucket's
		j, err := strconv.ParseInt(f, 10, 64)
		require.NoError(t, err)
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
		out[j] += n
	}
	return out
}

func sum(m map[int64]int64) (s int64) {
	for _, v := range m {
		s += v
	}
	return s
}

// perLimiter runs step over and over, in one goroutine per limiter, until
// stop closes or step returns false; it is the loop's iteration count. The
// returned func waits for every goroutine.
func perLimiter(ls []*sluice.Limiter, stop <-chan struct{}, step func(i int, l *sluice.Limiter, it int) bool) (wait func()) {
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := 0; ; it++ {
				select {
				case <-stop:
					return
				default:
				}
				if !step(i, l, it) {
					return
				}
			}
		}()
	}
	return wg.Wait
}

// hammer runs g goroutines per limiter calling Allow on key until stop
// closes; it returns the admitted count per limiter.
func hammer(t *testing.T, ls []*sluice.Limiter, g int, rule, key string, start []chan struct{}, stop chan struct{}) []int64 {
	t.Helper()
	admitted := make([]atomic.Int64, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		for range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if start != nil {
					<-start[i]
				}
				for {
					select {
					case <-stop:
						return
					default:
					}
					d, err := l.Allow(context.Background(), rule, key)
					if err != nil {
						t.Errorf("Allow: %v", err)
						return
					}
					if d.Allowed {
						admitted[i].Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	out := make([]int64, len(ls))
	for i := range admitted {
		out[i] = admitted[i].Load()
	}
	return out
}

func total(xs []int64) (s int64) {
	for _, x := range xs {
		s += x
	}
	return s
}

// syncCounts describes each limiter's syncer counters that tell why the store
// may hold other than what was admitted (round trips failed or resent,
// corrections, a degraded spell), for the message of an assertion on totals.
func syncCounts(ls []*sluice.Limiter) string {
	var b strings.Builder
	for i, l := range ls {
		st := l.Stats()
		s := st.Sync
		fmt.Fprintf(&b, "\ninstance %d: degraded %v, round trips %d (failed %d, resent %d), corrections %d, reservations %d, early syncs %d, waits %+v",
			i, st.Degraded, s.RoundTrips, s.Failures, s.Retried, s.Corrections, s.Reservations, s.EarlySyncs, s.Waits)
	}
	return b.String()
}
