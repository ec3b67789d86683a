package systemtest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
)

// admission is one admitted check: when its call began and ended (real
// time), and the store bucket it was counted in; unclear if the time it was
// decided on was so far behind the end of its call that the bucket may be
// an earlier one.
type admission struct {
	start, end time.Time
	bucket     int64
	unclear    bool
}

// edgeDoubt counts the unclear admissions that may belong on the other side
// of an edge of the bucket range [lo, hi]: those told to be in lo−1, lo, hi
// or hi+1.
func edgeDoubt(adm []admission, lo, hi int64) int64 {
	var n int64
	for _, a := range adm {
		if a.unclear && (a.bucket == lo-1 || a.bucket == lo || a.bucket == hi || a.bucket == hi+1) {
			n++
		}
	}
	return n
}

// maxRealWindow returns the most admissions in any real window (t−w, t],
// counting an admission only if its whole call lies inside the window, and
// the end of that window.
func maxRealWindow(adm []admission, w time.Duration) (most int, at time.Time) {
	byEnd := slices.Clone(adm)
	slices.SortFunc(byEnd, func(a, b admission) int { return a.end.Compare(b.end) })
	lo := 0
	for j, a := range byEnd {
		from := a.end.Add(-w)
		for lo < j && !byEnd[lo].end.After(from) {
			lo++
		}
		n := 0
		for _, b := range byEnd[lo : j+1] {
			if b.start.After(from) {
				n++
			}
		}
		if n > most {
			most, at = n, a.end
		}
	}
	return most, at
}

// inWindow counts the admissions whose whole call lies inside [from, to).
func inWindow(adm []admission, from, to time.Time) int {
	n := 0
	for _, a := range adm {
		if !a.start.Before(from) && a.end.Before(to) {
			n++
		}
	}
	return n
}

// TestMaxRealWindow: the real-window count on hand-made admissions.
func TestMaxRealWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(ms, dur int) admission {
		s := t0.Add(time.Duration(ms) * time.Millisecond)
		return admission{start: s, end: s.Add(time.Duration(dur) * time.Millisecond)}
	}
	for _, c := range []struct {
		name string
		adm  []admission
		want int
	}{
		{"none", nil, 0},
		{"all in one window", []admission{at(0, 1), at(500, 1), at(998, 1)}, 3},
		{"a window apart", []admission{at(0, 1), at(1000, 1), at(2000, 1)}, 1},
		// (t−1s, t] with t the second's end holds 2: the first call
		// began at t−1s exactly, outside.
		{"just apart", []admission{at(0, 1), at(1, 1000)}, 1},
		{"a long call counts only where it fits", []admission{at(0, 900), at(950, 10), at(1000, 10)}, 2},
	} {
		got, _ := maxRealWindow(c.adm, time.Second)
		assert.Equal(t, c.want, got, c.name)
	}
	assert.Equal(t, 2, inWindow([]admission{at(0, 1), at(10, 1), at(999, 2)}, t0, t0.Add(time.Second)))
}

// TestSentinelFailover runs a fleet of three instances, each with its own
// go-redis failover client (redis.NewFailoverClient) on a Redis Sentinel
// set-up (a master, a replica, three sentinels), checking eight keys of an
// Eventual sliding-window rule at twice their limit, and kills the master
// while the fleet is admitting (its pushes in flight), in two ways:
//
//   - crash: the master is killed with its replica in sync (on one host,
//     a replica receives a write within microseconds);
//   - lagging-replica: the replica is frozen for 300 ms before the master
//     is killed (redistest's KillMasterUnreplicated), so that every push
//     the master acknowledged in that time is lost, as a replica that lags
//     behind loses it in a real crash.
//
// The sentinels promote the replica; the fleet is on FailLocal meanwhile,
// then follows the failover by itself. It asserts:
//
//   - no check returns an error;
//   - the fleet recovers: every instance is healthy again and syncs with the
//     new master (Flush succeeds), and the new master counts exactly what
//     the fleet admitted after the recovery;
//   - nothing is counted twice: over the store's buckets up to the kill, the
//     new master holds at most what was admitted (each admission's bucket is
//     told from its Decision's ResetAfter; the few decided on a time too far
//     from the call's end to be sure are doubtful at the range's edges, and
//     allowed for);
//   - the bound in real windows: per key, the most admitted in any real
//     window of length W (only admissions whose whole call lies inside it)
//     is at most L(1+ε) plus the writes the failover lost (counts the old
//     master had acknowledged and its replica had not received, measured
//     per key as what was admitted in the store's buckets up to the kill
//     less what the new master holds of them once every instance has
//     pushed its outage counts); with the lagging replica, that the failover
//     did lose writes.
//
// How long the failover and the recovery took, and the admissions per real
// window around the kill, are reported, not asserted.
func TestSentinelFailover(t *testing.T) {
	// Not parallel with the package's other tests, nor with each other:
	// the sentinels' timing (down-after 500 ms) and the fleets' load would
	// disturb each other.
	for _, lag := range []bool{false, true} {
		name := "crash"
		if lag {
			name = "lagging-replica"
		}
		t.Run(name, func(t *testing.T) { sentinelFailover(t, lag) })
	}
}

// sentinelFailover is one case of TestSentinelFailover; with lag, the
// replica receives nothing for 300 ms before the master dies.
func sentinelFailover(t *testing.T, lag bool) {
	s := redistest.StartSentinel(t)
	const (
		n     = 3
		g     = 2 // goroutines per instance
		limit = 300
		eps   = 0.1
		nkeys = 8
	)
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	rule := policy.Rule{Name: "api", Limit: limit, Window: 3 * time.Second}
	sub := rulegeo.SubWindow(rule)
	span := int64(rule.Window / sub) // B: the store keeps the current bucket and B before it
	// Each key is offered twice its limit, spread over the goroutines.
	pace := time.Duration(n*g) * rule.Window / time.Duration(2*limit*nkeys)
	var logs logbuf.Buffer
	opts := sluice.Options{
		Prefix:       "failover",
		SyncInterval: 50 * time.Millisecond,
		Timeout:      100 * time.Millisecond,
		ErrorBudget:  eps,
		MinInstances: n,
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
	}
	ls := fleet(t, n, func() redis.UniversalClient {
		c := redis.NewFailoverClient(s.FailoverOptions())
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, opts, rule)
	direct := s.Client(t)

	var (
		mu       sync.Mutex
		admitted = map[string][]admission{}
		count    atomic.Int64 // admissions so far, all keys
		errs     atomic.Int64
		firstErr atomic.Value
		odd      atomic.Int64 // admissions whose bucket could not be told
		lagMax   atomic.Int64 // the most a decision's time was behind the end of its call
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	began := time.Now()
	for i, l := range ls {
		for gi := range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := map[string][]admission{}
				defer func() {
					mu.Lock()
					for k, a := range mine {
						admitted[k] = append(admitted[k], a...)
					}
					mu.Unlock()
				}()
				offset := time.Duration(i*g+gi) * pace / time.Duration(n*g)
				for it := 0; ; it++ {
					select {
					case <-stop:
						return
					default:
					}
					time.Sleep(time.Until(began.Add(offset + time.Duration(it)*pace)))
					key := keys[(it+i*g+gi)%nkeys]
					start := time.Now()
					d, err := l.Allow(context.Background(), rule.Name, key)
					end := time.Now()
					switch {
					case err != nil:
						errs.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Errorf("instance %d: %w", i, err))
					case d.Allowed:
						// ResetAfter is W plus the rest of the sub-window
						// the check counted in, from the time it decided
						// on: a time published every millisecond, so
						// behind the end of the call by the call's length
						// plus the publisher's lag (a millisecond, or tens
						// to hundreds of them when the machine starves the
						// publisher), give or take the change of the
						// store-clock offset since it was published (a few
						// ms at most). The end of the check's bucket, in
						// the store's time, is that time plus
						// ResetAfter − W: the one multiple of the
						// sub-window in (x − sub, x] for x the end of the
						// call plus ResetAfter − W + slack, if the lag is
						// in [−slack, sub − slack).
						const slack = 25 * time.Millisecond
						x := end.Add(l.Stats().Sync.Offset + d.ResetAfter - rule.Window + slack).UnixNano()
						ends := x / int64(sub)
						if x%int64(sub) < 0 {
							ends--
						}
						behind := time.Duration(x-ends*int64(sub)) - slack // the lag, if in range
						unclear := behind < -slack*4/5 || behind > sub-2*slack
						if unclear {
							odd.Add(1)
						}
						lagMax.Store(max(lagMax.Load(), int64(behind)))
						bucket := ends - 1
						mine[key] = append(mine[key], admission{start: start, end: end, bucket: bucket, unclear: unclear})
						count.Add(1)
					}
				}
			}()
		}
	}

	// A window and a half of traffic; then the master dies as the fleet
	// starts admitting again after a pause (the keys are offered twice
	// their limit: they admit in bursts as the window frees), so that
	// pushes are in flight, and with a lagging replica the lost ones hold
	// the start of a burst.
	time.Sleep(rule.Window * 3 / 2)
	for seen, quiet, deadline := count.Load(), time.Now(), time.Now().Add(2*rule.Window); time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		now := count.Load()
		if now == seen {
			continue
		}
		if time.Since(quiet) > 100*time.Millisecond {
			break // the first admission after a pause of 100 ms or more
		}
		seen, quiet = now, time.Now()
	}
	var old string
	if lag {
		old = s.KillMasterUnreplicated(t, 300*time.Millisecond, 32<<20)
	} else {
		old = s.KillMaster(t)
	}
	killedAt := time.Now()
	promoted := s.WaitFailover(t, old, 30*time.Second)
	promotedAt := time.Now()

	// The fleet follows the failover by itself: every instance healthy
	// again, and a sync of each succeeds.
	waitFor(t, 30*time.Second, "every limiter to see the store again", degraded(ls, false))
	healthyAt := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, l := range ls {
		require.NoError(t, l.Flush(ctx), "instance %d syncs with the new master", i)
	}
	recoveredAt := time.Now()
	var rebuilds int64 // losses of acknowledged writes the fleet saw and rebuilt
	for _, l := range ls {
		rebuilds += l.Stats().Sync.Rebuilds
	}

	// What the new master holds of the buckets up to the kill, now that
	// every instance has pushed what it had pending (its outage counts
	// too). Buckets that have left the window are gone from the store;
	// their admissions are older than any window the fleet decides from
	// now on.
	offset := ls[0].Stats().Sync.Offset
	killBucket := killedAt.Add(offset).UnixNano() / int64(sub)
	floor := recoveredAt.Add(offset).UnixNano()/int64(sub) - span
	held := map[string]map[int64]int64{}
	for _, k := range keys {
		held[k] = buckets(t, direct, opts.Prefix, rule.Name, k, sub)
	}

	// A window and more after the recovery, then stop.
	time.Sleep(rule.Window + 2*sub)
	close(stop)
	wg.Wait()
	stoppedAt := time.Now()
	closeAll(t, ls)
	readAt := time.Now()

	assert.Zero(t, errs.Load(), "checks returned errors: %v", firstErr.Load())
	bound := int64(float64(limit) * (1 + eps))
	var (
		most, lostAll, doubtAll, sinceAll int64
		mostKey                           string
		mostAt                            time.Time
		perWindow                         [5]int
		perKey                            strings.Builder
	)
	for _, k := range keys {
		adm := admitted[k]
		perBucket := map[int64]int64{}
		for _, a := range adm {
			perBucket[a.bucket]++
		}
		// Lost: admitted in the buckets up to the kill that the store
		// still keeps, less what the new master holds of them. An
		// admission whose bucket is unclear may belong across an edge of
		// the range: doubt is how many could.
		lo, hi := floor, killBucket
		var lost int64
		for b := lo; b <= hi; b++ {
			lost += perBucket[b] - held[k][b]
		}
		doubt := edgeDoubt(adm, lo, hi)
		if rebuilds == 0 {
			assert.GreaterOrEqual(t, lost, -doubt, "%s: the new master holds %d more than was admitted in buckets %d to %d: counted twice", k, -lost, lo, hi)
		} else if lost < -doubt {
			// A restore raises each bucket to the largest view an
			// instance held of it, which may count units leased and
			// given back since: more denials, never more admissions.
			t.Logf("%s: after the rebuild the new master holds %d more than was admitted in buckets %d to %d", k, -lost, lo, hi)
		}
		lost = max(lost, 0)
		lostAll += lost
		doubtAll += doubt

		// Admissions after the recovery reach the new master: the
		// buckets wholly after it and still in the store.
		after := buckets(t, direct, opts.Prefix, rule.Name, k, sub)
		lo = max(recoveredAt.Add(offset).UnixNano()/int64(sub)+1, readAt.Add(offset).UnixNano()/int64(sub)-span)
		hi = stoppedAt.Add(offset).UnixNano() / int64(sub)
		var since, stored int64
		for b := lo; b <= hi; b++ {
			since += perBucket[b]
			stored += after[b]
		}
		sinceAll += since
		assert.InDelta(t, since, stored, float64(edgeDoubt(adm, lo, hi)), "%s: the new master counts what was admitted after the recovery%s", k, syncCounts(ls))

		m, at := maxRealWindow(adm, rule.Window)
		// The fleet bound, whatever the failover lost: the heartbeat
		// after it finds the store went back in time (its own last entry
		// gone before its expiry), and the instances restore what their
		// views held before they pull again (docs/design-failures.md,
		// "When the store loses its data").
		assert.LessOrEqual(t, int64(m), bound,
			"%s: most admitted in a real window of %v (ending %v after the kill): L(1+ε) = %d (the store lacked %d after the failover; %d admissions whose bucket is unclear)",
			k, rule.Window, at.Sub(killedAt).Round(time.Millisecond), bound, lost, doubt)
		fmt.Fprintf(&perKey, " %s %d/%d", k, m, lost)
		if int64(m) > most {
			most, mostKey, mostAt = int64(m), k, at
		}
		for w := range perWindow {
			from := killedAt.Add(time.Duration(w-2) * rule.Window)
			perWindow[w] += inWindow(adm, from, from.Add(rule.Window))
		}
	}
	assert.Positive(t, sinceAll, "the fleet admits after the failover")
	if lag {
		// The master acknowledged pushes its frozen replica never got: the
		// fleet sees the store went back in time and rebuilds it (the
		// store then lacks little or nothing of what was admitted).
		assert.True(t, rebuilds > 0 || lostAll > 0, "the failover lost acknowledged writes: the fleet rebuilt the store, or it lacks them")
	}
	assert.Contains(t, logs.String(), "store unreachable", "the limiters log the outage")
	assert.Contains(t, logs.String(), "store reachable again", "and the recovery")

	// The admissions of all keys per sub-window around the kill.
	var timeline strings.Builder
	for from := killedAt.Add(-rule.Window); from.Before(stoppedAt); from = from.Add(sub) {
		c := 0
		for _, k := range keys {
			c += inWindow(admitted[k], from, from.Add(sub))
		}
		fmt.Fprintf(&timeline, " %d", c)
	}
	t.Logf("master %s killed; %s promoted after %v (the sentinels agree), every instance healthy after %v, synced after %v",
		old, promoted, promotedAt.Sub(killedAt).Round(time.Millisecond), healthyAt.Sub(killedAt).Round(time.Millisecond),
		recoveredAt.Sub(killedAt).Round(time.Millisecond))
	t.Logf("%d keys, L = %d per %v, L(1+ε) = %d: most in a real window %d (%s, window ending %v after the kill); lost in the failover %d (all keys; %d more in doubt); admitted after the recovery %d; %d admissions whose bucket was unclear",
		nkeys, limit, rule.Window, bound, most, mostKey, mostAt.Sub(killedAt).Round(time.Millisecond), lostAll, doubtAll, sinceAll, odd.Load())
	t.Logf("per key, most in a real window / lost:%s; a decision's time at most %v behind the end of its call",
		perKey.String(), time.Duration(lagMax.Load()).Round(time.Millisecond))
	t.Logf("all keys, per window of W around the kill [-2W,-W) [-W,0) [0,W) [W,2W) [2W,3W): %v (at most %d)", perWindow, nkeys*bound)
	t.Logf("all keys, per %v from W before the kill:%s", sub, timeline.String())
}
