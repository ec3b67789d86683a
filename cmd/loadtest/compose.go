package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/store"
	"github.com/sluicehq/sluice/policy"
)

// The composition profiles measure AllowAll and elastic rules on the fleet.
// They build their own rules from -limit (the per-key limit L), a window of
// a fifth of -duration (so that a run holds five windows), -instances,
// -workers, -keys, -budget and -sync, and report their own figures.
const (
	// Layered: every check is AllowAll against a tight rule (L per W) and a
	// wide one (10·L per 10·-duration: it never binds), half of the workers
	// with the tight rule first, half with it last, keys offered far above
	// L. It judges that the store counts under the wide rule exactly what
	// was admitted (a denial by the tight rule consumed nothing), and
	// reports the fleet's over-admission in any real interval of W, timed
	// on the wall clock, next to the error budget.
	Layered = "layered"
	// Elastic: clients with Limit L and Ceiling 10·L under a shared
	// capacity of 10·L per W (the heavy client offered twice that). In the first half one heavy client hammers
	// alone; in the second, -keys others arrive, each offered 0.8·L per W.
	// It measures the heavy client's admissions per window in each half
	// (it should reach the capacity alone and fall to its own Limit), and
	// that the others are never denied.
	Elastic = "elastic"
)

// composeProfiles are the profiles run by runCompose; they are run only
// when named (not by "all").
var composeProfiles = []string{Layered, Elastic, Concurrency}

// composeResult is what a composition profile measured, printed after the
// report.
type composeResult struct {
	Profile string
	Lines   []string
	OK      bool
}

// composeFleet starts o.Instances limiters with rules, each with its own
// client, and returns them with a cleanup.
func composeFleet(o *options, target store.Target, prefix string, rules ...policy.Rule) ([]*sluice.Limiter, []redis.UniversalClient, func(), error) {
	var ls []*sluice.Limiter
	var cs []redis.UniversalClient
	done := func() {
		for _, l := range ls {
			_ = l.Close()
		}
		for _, c := range cs {
			_ = c.Close()
		}
	}
	for range o.Instances {
		c := target.Client()
		cs = append(cs, c)
		l, err := sluice.New(sluice.Options{
			Redis: c, Prefix: prefix, SyncInterval: o.Sync, ErrorBudget: o.Budget,
			Timeout: o.Timeout, MinInstances: o.Instances,
			Logger: slog.New(slog.DiscardHandler), // off the terminal, as the fleet's
		}, rules...)
		if err != nil {
			done()
			return nil, nil, nil, err
		}
		ls = append(ls, l)
	}
	return ls, cs, done, nil
}

// flushFleet flushes every limiter twice: corrections queued by the first
// (refunds) go with the second.
func flushFleet(ls []*sluice.Limiter) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		for _, l := range ls {
			if err := l.Flush(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// storeTotal sums a key's bucket counts in the store.
func storeTotal(ctx context.Context, c redis.UniversalClient, prefix string, r policy.Rule, key string) (int64, error) {
	h, err := c.HGetAll(ctx, redisKeyName(prefix, r, key)).Result()
	if err != nil {
		return 0, err
	}
	var s int64
	for f, v := range h {
		if strings.Contains(f, ":") {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		s += n
	}
	return s, nil
}

// maxInWindow returns the most admissions of ts (sorted) in any interval of
// length w.
func maxInWindow(ts []int64, w int64) int {
	best, lo := 0, 0
	for hi := range ts {
		for ts[hi]-ts[lo] >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// runCompose runs one composition profile.
func runCompose(ctx context.Context, o *options, profile string, target store.Target, prefix string) (composeResult, error) {
	switch profile {
	case Layered:
		return runLayered(ctx, o, target, prefix)
	case Elastic:
		return runElastic(ctx, o, target, prefix)
	case Concurrency:
		return runConcurrency(ctx, o, target, prefix)
	}
	return composeResult{}, fmt.Errorf("unknown composition profile %q", profile)
}

func runLayered(ctx context.Context, o *options, target store.Target, prefix string) (composeResult, error) {
	w := o.Duration / 5
	limit := o.Rule.Limit
	tight := policy.Rule{Name: "tight", Limit: limit, Window: w}
	wide := policy.Rule{Name: "wide", Limit: 10 * limit, Window: 10 * o.Duration}
	ls, cs, done, err := composeFleet(o, target, prefix, tight, wide)
	if err != nil {
		return composeResult{}, err
	}
	defer done()
	keys := o.keysFor(Layered)
	type rec struct {
		key int
		at  int64
	}
	var mu sync.Mutex
	var admits []rec
	var checks, denied int64
	stop := time.Now().Add(o.Duration)
	var wg sync.WaitGroup
	for i, l := range ls {
		for g := range o.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
				var mine []rec
				var c, d int64
				for time.Now().Before(stop) && ctx.Err() == nil {
					k := rng.IntN(keys)
					key := "k" + strconv.Itoa(k)
					checks := [2]sluice.Check{{Rule: "tight", Key: key}, {Rule: "wide", Key: key}}
					if g%2 == 1 {
						checks[0], checks[1] = checks[1], checks[0]
					}
					dec, err := l.AllowAll(ctx, 1, checks[:]...)
					c++
					if err == nil && dec.Allowed {
						mine = append(mine, rec{k, time.Now().UnixNano()})
					} else {
						d++
					}
				}
				mu.Lock()
				admits = append(admits, mine...)
				checks += c
				denied += d
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if err := flushFleet(ls); err != nil {
		return composeResult{}, err
	}
	perKey := make([][]int64, keys)
	for _, a := range admits {
		perKey[a.key] = append(perKey[a.key], a.at)
	}
	var worst float64
	exact := true
	var mismatch string
	for k, ts := range perKey {
		slices.Sort(ts)
		worst = max(worst, float64(maxInWindow(ts, int64(w)))/float64(limit)-1)
		key := "k" + strconv.Itoa(k)
		for _, r := range []policy.Rule{tight, wide} {
			n, err := storeTotal(ctx, cs[0], prefix, r, key)
			if err != nil {
				return composeResult{}, err
			}
			if r.Name == "wide" && n != int64(len(ts)) {
				exact = false
				mismatch = fmt.Sprintf(" (key %s: store %d, admitted %d)", key, n, len(ts))
			}
		}
	}
	// Judged: the store's count. The over-admission is timed on the wall
	// clock when AllowAll returned, which a loaded machine delays (the
	// other profiles recover the limiter's own decision time instead): it
	// is reported, not judged.
	ok := exact
	return composeResult{Profile: Layered, OK: ok, Lines: []string{
		fmt.Sprintf("rules: tight %d/%v, wide %d/%v; %d keys; %d instances × %d workers, half tight-first; %v", limit, w, wide.Limit, wide.Window, keys, o.Instances, o.Workers, o.Duration),
		fmt.Sprintf("checks %d (%.0f/s), admitted %d, denied %d", checks, float64(checks)/o.Duration.Seconds(), len(admits), denied),
		fmt.Sprintf("fleet over-admission (most admitted in any real interval of %v ÷ L − 1, worst key, timed when AllowAll returned: not judged): %s (ε %s)", w, pctText(max(worst, 0)), pctText(o.Budget)),
		fmt.Sprintf("the wide rule's store count equals what was admitted, every key: %v%s", exact, mismatch),
	}}, nil
}

func runElastic(ctx context.Context, o *options, target store.Target, prefix string) (composeResult, error) {
	w := o.Duration / 5
	limit := o.Rule.Limit
	capacity := policy.Rule{Name: "service", Limit: 10 * limit, Window: w}
	client := policy.Rule{Name: "client", Limit: limit, Window: w, Ceiling: 10 * limit, Capacity: "service"}
	ls, _, done, err := composeFleet(o, target, prefix, capacity, client)
	if err != nil {
		return composeResult{}, err
	}
	defer done()
	others := o.keysFor(Elastic)
	start := time.Now()
	half := o.Duration / 2
	var mu sync.Mutex
	var heavy, tried []int64
	var othersAdmitted, othersDenied int64
	var errs atomic.Int64
	var wg sync.WaitGroup
	// pace offers checks evenly at one per gap from from to the end, and
	// calls check for each.
	pace := func(from, gap time.Duration, check func()) {
		time.Sleep(time.Until(start.Add(from)))
		sent := 0
		for ctx.Err() == nil {
			el := time.Since(start)
			if el >= o.Duration {
				return
			}
			for want := int((el - from) / gap); sent < want; sent++ {
				check()
			}
			time.Sleep(time.Millisecond)
		}
	}
	// The heavy client: offered twice the capacity, spread over the
	// instances, all the run.
	heavyGap := time.Duration(float64(w) / float64(2*capacity.Limit) * float64(len(ls)))
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine, offered []int64
			pace(0, heavyGap, func() {
				at := time.Since(start).Nanoseconds()
				offered = append(offered, at)
				if d, err := l.Allow(ctx, "client", "heavy"); err == nil && d.Allowed {
					mine = append(mine, at)
				}
			})
			mu.Lock()
			heavy = append(heavy, mine...)
			tried = append(tried, offered...)
			mu.Unlock()
		}()
	}
	// The others: from the second half, each offered 0.8·L per W.
	gap := time.Duration(float64(w) / (0.8 * float64(limit)))
	for k := range others {
		l := ls[k%len(ls)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "other-" + strconv.Itoa(k)
			var a, d int64
			pace(half, gap, func() {
				dec, err := l.Allow(ctx, "client", key)
				switch {
				case err == nil && dec.Allowed:
					a++
				case err != nil:
					errs.Add(1)
				default:
					d++
				}
			})
			mu.Lock()
			othersAdmitted += a
			othersDenied += d
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(heavy)
	slices.Sort(tried)
	// The last whole window of each half.
	count := func(ts []int64, from, to time.Duration) int {
		lo, _ := slices.BinarySearch(ts, from.Nanoseconds())
		hi, _ := slices.BinarySearch(ts, to.Nanoseconds())
		return hi - lo
	}
	alone, aloneOffered := count(heavy, half-w, half), count(tried, half-w, half)
	crowd, crowdOffered := count(heavy, o.Duration-w, o.Duration), count(tried, o.Duration-w, o.Duration)
	worst := maxInWindow(heavy, int64(w))
	offered := float64(others) * 0.8 * float64(limit)
	// The verdict: alone, the heavy client gets at least half the capacity
	// (or of what it offered); with the others, at most its Limit plus the
	// meter's error (2·ε·capacity); never more than the capacity plus that
	// in any real window; the others are (almost) never denied: at most 1%,
	// a paced client on a loaded machine is not steady.
	crowdBound := float64(limit) + 2*o.Budget*float64(capacity.Limit)
	bound := float64(capacity.Limit) * (1 + 2*o.Budget)
	ok := float64(alone) >= 0.5*float64(min(int64(aloneOffered), capacity.Limit)) && float64(worst) <= bound &&
		float64(crowd) <= crowdBound && float64(othersDenied) <= 0.01*float64(othersAdmitted+othersDenied) && errs.Load() == 0
	return composeResult{Profile: Elastic, OK: ok, Lines: []string{
		fmt.Sprintf("rules: client %d/%v with Ceiling %d under a capacity of %d/%v; the heavy client offered %d per window on %d instances from the start; %d others from %v, each offered 0.8·L per window (%.0f per window in all); %v",
			limit, w, client.Ceiling, capacity.Limit, w, 2*capacity.Limit, len(ls), others, half, offered, o.Duration),
		fmt.Sprintf("heavy client alone (last window of the first half): %d admitted of %d offered (Limit %d, Ceiling and capacity %d)", alone, aloneOffered, limit, capacity.Limit),
		fmt.Sprintf("heavy client with the others (last window): %d admitted of %d offered (its Limit %d; bound Limit + 2·ε·capacity = %.0f)", crowd, crowdOffered, limit, crowdBound),
		fmt.Sprintf("heavy client, most in any real interval of %v: %d (capacity·(1+2ε) %.0f)", w, worst, bound),
		fmt.Sprintf("the others: admitted %d, denied %d (each within its Limit: never denied), errors %d", othersAdmitted, othersDenied, errs.Load()),
	}}, nil
}

// printCompose writes the composition profiles' figures.
func printCompose(w io.Writer, rs []composeResult) {
	for _, r := range rs {
		mark := "✓"
		if !r.OK {
			mark = "✗"
		}
		fmt.Fprintf(w, "\n%s %s\n", mark, r.Profile)
		for _, l := range r.Lines {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
}
