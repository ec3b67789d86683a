package systemtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
)

// A moving pattern says which instance of n gets a key's check i of m.
type moving struct {
	name string
	to   func(i, m, n int) int
}

var movings = []moving{
	// All at once: the first third on instance 0, the rest on instance 1.
	{"switch", func(i, m, _ int) int {
		if 3*i < m {
			return 0
		}
		return 1
	}},
	// Round robin over every instance.
	{"round-robin", func(i, _, n int) int { return i % n }},
	// Instance 0 drains into instance 1: the share of instance 1 grows
	// from 0 to all of it, evenly.
	{"drain", func(i, m, _ int) int {
		if (i*7919)%m < i { // a deterministic spread of i/m of the checks
			return 1
		}
		return 0
	}},
}

// TestFleetMovingTraffic offers keys at most 0.9·Limit in every interval of
// a window and a sub-window, their traffic moving between the instances of
// a fleet (all at once from one to another, round robin, one draining into
// another), under every algorithm an Eventual rule takes, at 4 and 8
// instances, with 1 s and 1 min windows: nothing may be denied. The
// instances' leases must follow the traffic: units one instance leased and
// no longer uses must not deny the checks another gets.
//
// A 1 s window's keys are offered 0.88·Limit per window and sub-window,
// evenly, for 2.5 s; a 1 min window's (whose clock, the store's, cannot be
// sped up) 0.88·Limit in 4 s, which crosses a sub-window's end. The premise
// is checked on the traffic as sent: a denied check is false if the span of
// a window and a sub-window that ends with it (10 ms more, for the clocks)
// held at most 0.9·Limit checks; a stalled sender that bunched the traffic
// past that excuses only the denials it caused.
func TestFleetMovingTraffic(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a minute of real time")
	}
	srv := redistest.Start(t)
	algos := []policy.Algorithm{policy.SlidingWindow, policy.WeightedWindow, policy.FixedWindow, policy.TokenBucket, policy.GCRA}
	for _, w := range []time.Duration{time.Second, time.Minute} {
		for _, n := range []int{4, 8} {
			for _, a := range algos {
				t.Run(fmt.Sprintf("%s/%v/n=%d", a, w, n), func(t *testing.T) {
					t.Parallel()
					movingRun(t, srv, fmt.Sprintf("mv.%s.%d.%d", a, w/time.Second, n), a, w, n)
				})
			}
		}
	}
}

// movingRun runs one case on a fleet of its own (its own prefix: its own
// registry).
func movingRun(t *testing.T, srv *redistest.Server, prefix string, a policy.Algorithm, w time.Duration, n int) {
	const (
		limit = 1000
		eps   = 0.01
	)
	rule := policy.Rule{Name: "mv", Limit: limit, Window: w, Algorithm: a, Mode: policy.Eventual}
	// A generous Timeout: this is about what the fleet decides, not latency.
	opts := sluice.Options{Prefix: prefix, ErrorBudget: eps, Timeout: 2 * time.Second, MinInstances: n}
	ls := fleet(t, n, func() redis.UniversalClient { return srv.Client(t) }, opts, rule)
	span := w + w/10 + 10*time.Millisecond
	d, total := 2500*time.Millisecond, int(float64(limit)*0.88*2500/1100)
	if w == time.Minute {
		d, total = 4*time.Second, limit*88/100
	}
	every := d / time.Duration(total)
	type outcome struct {
		sent   []time.Duration
		denied []int
	}
	out := make([]outcome, len(movings))
	start := time.Now()
	var wg sync.WaitGroup
	for p, mv := range movings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "k-" + mv.name
			for i := range total {
				time.Sleep(time.Until(start.Add(time.Duration(i) * every)))
				out[p].sent = append(out[p].sent, time.Since(start))
				dec, err := ls[mv.to(i, total, n)].Allow(context.Background(), rule.Name, key)
				if !assert.NoError(t, err) {
					return
				}
				if !dec.Allowed {
					out[p].denied = append(out[p].denied, i)
				}
			}
		}()
	}
	wg.Wait()
	for p, o := range out {
		var falsely []int
		excused := 0
		for _, i := range o.denied {
			if sentIn(o.sent[:i+1], o.sent[i]-span) <= limit*9/10 {
				falsely = append(falsely, i)
			} else {
				excused++
			}
		}
		if excused > 0 {
			t.Logf("%s: %d denials after more than 0.9·Limit sent in %v (a stalled sender bunched the traffic)", movings[p].name, excused, span)
		}
		assert.Empty(t, falsely, "%s: checks denied (of %d) with at most 0.9·Limit sent in the %v before, by instance: %v%s",
			movings[p].name, total, span, deniedBy(falsely, total, n, movings[p]), syncCounts(ls))
	}
	if (a == policy.SlidingWindow || a == policy.WeightedWindow) && w == time.Minute {
		// The store counts exactly what was admitted, once every lease has
		// ended: a lease ended while idle gave back only units not used.
		closeAll(t, ls)
		for p, o := range out {
			admitted := int64(len(o.sent) - len(o.denied))
			b := buckets(t, srv.Client(t), prefix, rule.Name, "k-"+movings[p].name, rulegeo.SubWindow(rule))
			assert.Equal(t, admitted, sum(b), "%s: Redis counts what was admitted", movings[p].name)
		}
	}
}

// sentIn returns how many of the sorted times ts are after from.
func sentIn(ts []time.Duration, from time.Duration) int {
	i, _ := slices.BinarySearch(ts, from+1)
	return len(ts) - i
}

// deniedBy counts denied checks by the instance they went to.
func deniedBy(denied []int, m, n int, mv moving) map[int]int {
	by := map[int]int{}
	for _, i := range denied {
		by[mv.to(i, m, n)]++
	}
	return by
}

func TestSentIn(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	ts := []time.Duration{0, 5 * ms, 10 * ms}
	require.Equal(t, 3, sentIn(ts, -ms))
	require.Equal(t, 2, sentIn(ts, 0))
	require.Equal(t, 1, sentIn(ts, 9*ms))
	require.Equal(t, 0, sentIn(ts, 10*ms))
	require.Equal(t, 0, sentIn(nil, 0))
}
