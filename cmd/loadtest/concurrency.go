package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/store"
	"github.com/sluicehq/sluice/internal/keyname"
	"github.com/sluicehq/sluice/policy"
)

// Concurrency: -instances limiters (at least 2) share an InFlight rule of
// concLimit slots per key; in front of each, an adaptive.Limiter (AIMD)
// sheds by priority. -workers goroutines per instance each loop over
// requests: a priority (20 % critical, 40 % default, 40 % sheddable), a
// key (k0, the hot one, half the time, else one of four cold ones), the
// adaptive slot, then the fleet slot, held for the request's duration, as
// a front door holds both; a refusal backs off concBackoff. A request's
// duration is that of a modelled server of concServers workers per
// instance: service·max(1, n/concServers)·U(0.8, 1.2) with n the adaptive
// slots held on the instance; service is concService, and twice that from
// the middle of the run (the latency step). At 30 % of the run the last
// instance is killed: its workers stop without releasing, its limiter is
// closed (no more renewals). At the end the others release everything.
//
// Judged, from what was observed: the most slots held at once per key
// (counted at every admission and in samples every 5 ms) within the limit
// plus its budget (none: the store decides every Acquire) and the limit
// reached (exercised); the killed instance's leases lapsed in the store
// within the lease TTL; no lease left in the store at the end; the adaptive
// limit fell after the step and settled; sheddable requests refused more
// often than critical ones, and first.
const Concurrency = "concurrency"

// The concurrency profile's fixed settings.
const (
	concLimit   = 20
	concRule    = "conc"
	concKeys    = 5 // k0 hot, k1…k4 cold
	concServers = 8
	concService = 20 * time.Millisecond
	concBackoff = 10 * time.Millisecond
	// concThreshold is the AIMD threshold: 2.5·concService, so the limit
	// settles near 2.5·concServers in flight before the step and near
	// half that after it.
	concThreshold = 50 * time.Millisecond
	concSample    = 5 * time.Millisecond
	concPoll      = 20 * time.Millisecond
)

// concMeasured is what the concurrency profile observed; its verdict is
// computed from it alone.
type concMeasured struct {
	Limit     int64
	Instances int
	Workers   int
	Duration  time.Duration
	TTL       time.Duration

	Samples     int64           // samples of the slots held
	MaxHeld     [concKeys]int64 // most slots held at once per key: at admissions and in samples
	StoreMax    [concKeys]int64 // most live leases per key in the store's polls
	Admitted    int64           // fleet slots taken
	Denied      [concKeys]int64 // fleet denials per key
	Errors      int64           // Acquire errors (adaptive or fleet)
	Polls       int64           // store polls
	KilledHeld  int64           // live leases of the killed instance in the store just after the kill
	Abandoned   int64           // slots its workers dropped
	LeaseEnd    time.Duration   // the latest end (score) of its leases seen after the kill, from the kill, on the store's clock
	FreedAfter  time.Duration   // kill to the first poll with none of its leases live; -1: never
	Fallback    int64           // Acquires the failure mode decided (sluice.inflight.acquires, path fallback): the store did not answer
	LeftMembers int64           // members of the rule's sorted sets at the end (after the wait)
	LeftWait    time.Duration   // how long the end waited for them
	LeftLive    int64           // of them, of the instances that were not killed
	PreLimit    float64         // mean adaptive limit (estimate) before the step, over the live instances
	PostLimit   [2]float64      // its mean in the two halves of the last 30 % of the run
	FollowAfter time.Duration   // step to the first sample within 20 % of the settled limit; -1: never
	Offered     [adaptive.NumPriorities]int64
	Shed        [adaptive.NumPriorities]int64
	FirstShed   [adaptive.NumPriorities]time.Duration // since the start; -1: never
}

// concCheck is one judged line of the verdict. A check that failed
// with an excuse is not a broken promise: what it relies on did not hold
// (the store did not answer), as measured.
type concCheck struct {
	ok     bool
	text   string
	excuse string
}

// verdict judges m: each line with ✓ or ✗, and whether all passed.
func (m *concMeasured) verdict() ([]concCheck, bool) {
	var cs []concCheck
	add := func(ok bool, format string, a ...any) {
		cs = append(cs, concCheck{ok: ok, text: fmt.Sprintf(format, a...)})
	}
	var worst, worstStore int64
	for k := range concKeys {
		worst = max(worst, m.MaxHeld[k])
		worstStore = max(worstStore, m.StoreMax[k])
	}
	add(m.Samples > 0 && worst <= m.Limit,
		"most slots held at once per key, fleet-wide (at every admission and in %d samples): %d (limit %d, while the store answers); the store's live leases, at most %d; Acquires decided by the failure mode: %d",
		m.Samples, worst, m.Limit, worstStore, m.Fallback)
	if last := &cs[len(cs)-1]; !last.ok && m.Samples > 0 && m.Fallback > 0 {
		last.excuse = fmt.Sprintf("the store did not answer %d Acquires within -timeout, which FailLocal decided on this instance's share (the limit holds while the store answers): the machine's or the store's, not a broken promise", m.Fallback)
	}
	add(m.MaxHeld[0] >= m.Limit && m.Denied[0] > 0,
		"the hot key reached its limit: %d held at most, %d denials (exercised)", m.MaxHeld[0], m.Denied[0])
	freed := "never"
	if m.FreedAfter >= 0 {
		freed = m.FreedAfter.Round(time.Millisecond).String()
	}
	add(m.KilledHeld > 0 && m.FreedAfter >= 0 && m.LeaseEnd <= m.TTL,
		"killed instance: %d live leases at the kill (%d slots abandoned), their latest end %v after it on the store's clock (lease TTL %v), none live at a poll %s after it (polled every %v)",
		m.KilledHeld, m.Abandoned, m.LeaseEnd.Round(time.Millisecond), m.TTL, freed, concPoll)
	add(m.Polls > 0 && m.LeftMembers == 0,
		"no slot leaked: %d members left in the store's sorted sets %v after the last release (%d of live instances)",
		m.LeftMembers, m.LeftWait.Round(time.Millisecond), m.LeftLive)
	post := (m.PostLimit[0] + m.PostLimit[1]) / 2
	follow := "never"
	if m.FollowAfter >= 0 {
		follow = m.FollowAfter.Round(time.Millisecond).String()
	}
	add(m.PreLimit > 0 && post > 0 && post <= 0.75*m.PreLimit && math.Abs(m.PostLimit[1]-m.PostLimit[0]) <= 0.15*post,
		"adaptive limit followed the step: %.1f before, %.1f then %.1f after (settled: within 15 %%; followed: at most 0.75× before), within 20 %% of it %s after the step",
		m.PreLimit, m.PostLimit[0], m.PostLimit[1], follow)
	rate := func(p adaptive.Priority) float64 {
		if m.Offered[p] == 0 {
			return 0
		}
		return float64(m.Shed[p]) / float64(m.Offered[p])
	}
	first := func(p adaptive.Priority) string {
		if m.FirstShed[p] < 0 {
			return "never"
		}
		return "at " + m.FirstShed[p].Round(time.Millisecond).String()
	}
	sc, sd, ss := adaptive.Critical, adaptive.Default, adaptive.Sheddable
	firstOK := m.FirstShed[ss] >= 0 && (m.FirstShed[sc] < 0 || m.FirstShed[ss] <= m.FirstShed[sc])
	add(m.Shed[ss] > 0 && rate(ss) > rate(sc) && rate(sd) >= rate(sc) && firstOK,
		"shed sheddable before critical: shed %s sheddable (first %s), %s default, %s critical (first %s)",
		pctText(rate(ss)), first(ss), pctText(rate(sd)), pctText(rate(sc)), first(sc))
	add(m.Errors == 0, "no Acquire errors: %d", m.Errors)
	ok := true
	for _, c := range cs {
		ok = ok && (c.ok || c.excuse != "")
	}
	return cs, ok
}

// concZKey is the store key of a key's leases under the profile's rule.
func concZKey(prefix, key string) string {
	return keyname.InFlight(prefix, concRule, key)
}

// concInstance is one instance of the concurrency profile.
type concInstance struct {
	id     string
	mp     *sdkmetric.MeterProvider
	rd     *sdkmetric.ManualReader
	l      *sluice.Limiter
	al     *adaptive.Limiter
	c      redis.UniversalClient
	killed atomic.Bool
	n      atomic.Int64 // adaptive slots held
}

func runConcurrency(ctx context.Context, o *options, target store.Target, prefix string) (composeResult, error) {
	m, err := measureConcurrency(ctx, o, target, prefix)
	if err != nil {
		return composeResult{}, err
	}
	return concResult(m), nil
}

// concResult is the report of a run of the concurrency profile: its
// settings, its counts and its verdict.
func concResult(m *concMeasured) composeResult {
	cs, ok := m.verdict()
	lines := []string{fmt.Sprintf("rule: %d in flight per key (InFlight, fleet-wide), %d keys (k0 half the requests); %d instances × %d workers, each behind an adaptive limiter (AIMD, threshold %v); requests of %v·max(1, n/%d)·U(0.8, 1.2), twice that from %v; the last instance killed at %v; %v",
		m.Limit, concKeys, m.Instances, m.Workers, concThreshold, concService, concServers, m.Duration/2, m.Duration*3/10, m.Duration)}
	lines = append(lines, fmt.Sprintf("fleet slots taken %d, denied %d (hot key %d), store polls %d", m.Admitted, sum(m.Denied[:]), m.Denied[0], m.Polls))
	for _, c := range cs {
		switch {
		case c.ok:
			lines = append(lines, "✓ "+c.text)
		case c.excuse != "":
			lines = append(lines, "✗ "+c.text+" — "+c.excuse)
		default:
			lines = append(lines, "✗ "+c.text+" — broken")
		}
	}
	return composeResult{Profile: Concurrency, OK: ok, Lines: lines}
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// measureConcurrency runs the concurrency profile and returns what it
// observed.
func measureConcurrency(ctx context.Context, o *options, target store.Target, prefix string) (*concMeasured, error) {
	if o.Instances < 2 {
		return nil, fmt.Errorf("-profile %s kills an instance: it needs -instances 2 or more", Concurrency)
	}
	d := o.Duration
	m := &concMeasured{
		Limit: concLimit, Instances: o.Instances, Workers: o.Workers, Duration: d,
		TTL:        max(3*o.Sync, sluice.MinInFlightTTL),
		FreedAfter: -1, FollowAfter: -1,
	}
	for p := range m.FirstShed {
		m.FirstShed[p] = -1
	}
	rule := policy.Rule{Name: concRule, Limit: concLimit, InFlight: true}
	var insts []*concInstance
	defer func() {
		for _, in := range insts {
			if !in.killed.Load() {
				_ = in.l.Close()
				_ = in.al.Close()
				_ = in.c.Close()
				_ = in.mp.Shutdown(context.Background())
			}
		}
	}()
	for i := range o.Instances {
		in := &concInstance{id: "conc-" + strconv.Itoa(i), c: target.Client(), rd: sdkmetric.NewManualReader()}
		in.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(in.rd))
		var err error
		in.l, err = sluice.New(sluice.Options{
			Redis: in.c, Prefix: prefix, SyncInterval: o.Sync, Timeout: o.Timeout,
			InstanceID: in.id, Logger: slog.New(slog.DiscardHandler), MeterProvider: in.mp,
		}, rule)
		if err != nil {
			_ = in.c.Close()
			return nil, err
		}
		in.al, err = adaptive.New(adaptive.Options{
			Algorithm: &adaptive.AIMD{Threshold: concThreshold}, Min: 2, Max: 200, Initial: 20, Name: in.id,
		})
		if err != nil {
			_ = in.l.Close()
			_ = in.c.Close()
			return nil, err
		}
		insts = append(insts, in)
	}
	keys := make([]string, concKeys)
	zkeys := make([]string, concKeys)
	for k := range keys {
		keys[k] = "k" + strconv.Itoa(k)
		zkeys[k] = concZKey(prefix, keys[k])
	}
	poller := target.Client()
	defer poller.Close()
	// fallback counts an instance's Acquires decided by the failure mode,
	// from its metrics.
	fallback := func(in *concInstance) int64 {
		var rm metricdata.ResourceMetrics
		if in.rd.Collect(context.Background(), &rm) != nil {
			return 0
		}
		var n int64
		for _, sm := range rm.ScopeMetrics {
			for _, mt := range sm.Metrics {
				d, ok := mt.Data.(metricdata.Sum[int64])
				if mt.Name != "sluice.inflight.acquires" || !ok {
					continue
				}
				for _, p := range d.DataPoints {
					if v, _ := p.Attributes.Value("path"); v.AsString() == "fallback" {
						n += p.Value
					}
				}
			}
		}
		return n
	}

	var held [concKeys]atomic.Int64
	var maxHeld [concKeys]atomic.Int64
	var denied [concKeys]atomic.Int64
	var offered, shed [adaptive.NumPriorities]atomic.Int64
	var firstShed [adaptive.NumPriorities]atomic.Int64 // ns since start + 1; 0 never
	var admitted, errs, abandoned atomic.Int64
	raise := func(a *atomic.Int64, v int64) {
		for {
			c := a.Load()
			if v <= c || a.CompareAndSwap(c, v) {
				return
			}
		}
	}
	start := time.Now()
	step := start.Add(d / 2)
	var stop atomic.Bool
	sleep := func(dur time.Duration) {
		select {
		case <-time.After(dur):
		case <-ctx.Done():
		}
	}
	var wg sync.WaitGroup
	for i, in := range insts {
		for g := range m.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(o.Seed+uint64(i), uint64(g)))
				for !stop.Load() && ctx.Err() == nil && !in.killed.Load() {
					var p adaptive.Priority
					switch x := rng.IntN(10); {
					case x < 2:
						p = adaptive.Critical
					case x < 6:
						p = adaptive.Default
					default:
						p = adaptive.Sheddable
					}
					k := 0
					if rng.IntN(2) == 1 {
						k = 1 + rng.IntN(concKeys-1)
					}
					offered[p].Add(1)
					as, err := in.al.Acquire(ctx, p)
					if err != nil {
						if !in.killed.Load() && ctx.Err() == nil {
							errs.Add(1)
						}
						sleep(concBackoff)
						continue
					}
					if !as.OK() {
						shed[p].Add(1)
						firstShed[p].CompareAndSwap(0, int64(time.Since(start))+1)
						sleep(concBackoff)
						continue
					}
					n := in.n.Add(1)
					slot, dec, err := in.l.Acquire(ctx, concRule, keys[k])
					if err != nil || !dec.Allowed {
						if err != nil && !in.killed.Load() && ctx.Err() == nil {
							errs.Add(1)
						} else if err == nil {
							denied[k].Add(1)
						}
						in.n.Add(-1)
						as.Release(adaptive.Ignored)
						sleep(concBackoff)
						continue
					}
					admitted.Add(1)
					raise(&maxHeld[k], held[k].Add(1))
					service := concService
					if time.Now().After(step) {
						service *= 2
					}
					sleep(time.Duration(float64(service) * max(1, float64(n)/concServers) * (0.8 + 0.4*rng.Float64())))
					if in.killed.Load() {
						// A crash: neither slot is released; the
						// fleet slot is no longer held by a live
						// process, its lease lapses in the store.
						held[k].Add(-1)
						abandoned.Add(1)
						return
					}
					held[k].Add(-1)
					in.n.Add(-1)
					as.Release(adaptive.Success)
					slot.Release()
				}
			}()
		}
	}
	// The sampler: slots held every concSample, the adaptive limits of
	// the instances that are not killed every 4th.
	live := insts[:len(insts)-1]
	type limitSample struct {
		at  time.Duration
		est float64
	}
	var limits []limitSample
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(concSample)
		defer t.Stop()
		for i := 0; !stop.Load() && ctx.Err() == nil; i++ {
			<-t.C
			for k := range held {
				raise(&maxHeld[k], held[k].Load())
			}
			m.Samples++
			if i%4 == 0 {
				var s float64
				for _, in := range live {
					s += in.al.Stats().Estimate
				}
				limits = append(limits, limitSample{time.Since(start), s / float64(len(live))})
			}
		}
	}()
	// The poller: every lease in the store, against the store's clock.
	killedID := insts[len(insts)-1].id + ":"
	var killAt time.Time // set before killed is, read after
	var killedFlag atomic.Bool
	type polled struct {
		live, killedLive [concKeys]int64
		members          int64
		now, killedEnd   float64 // the store's clock, the latest end of the killed instance's leases (ms)
	}
	poll := func(pctx context.Context) (pl polled, err error) {
		pipe := poller.Pipeline()
		tm := pipe.Time(pctx)
		zs := make([]*redis.ZSliceCmd, concKeys)
		for k, z := range zkeys {
			zs[k] = pipe.ZRangeWithScores(pctx, z, 0, -1)
		}
		if _, err = pipe.Exec(pctx); err != nil && !errors.Is(err, redis.Nil) {
			return pl, err
		}
		pl.now = float64(tm.Val().UnixMilli())
		for k, zc := range zs {
			for _, z := range zc.Val() {
				pl.members++
				killed := strings.HasPrefix(z.Member.(string), killedID)
				if killed {
					pl.killedEnd = max(pl.killedEnd, z.Score)
				}
				if z.Score <= pl.now {
					continue // lapsed: the next Acquire of the key removes it
				}
				pl.live[k]++
				if killed {
					pl.killedLive[k]++
				}
			}
		}
		return pl, nil
	}
	var storeMax [concKeys]int64
	var killedEnd float64
	pollerDone := make(chan struct{})
	go func() {
		defer close(pollerDone)
		t := time.NewTicker(concPoll)
		defer t.Stop()
		for !stop.Load() && ctx.Err() == nil {
			<-t.C
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			pl, err := poll(pctx)
			cancel()
			if err != nil {
				continue
			}
			m.Polls++
			for k := range pl.live {
				storeMax[k] = max(storeMax[k], pl.live[k])
			}
			if killedFlag.Load() {
				killedEnd = max(killedEnd, pl.killedEnd)
				if m.FreedAfter < 0 && sum(pl.killedLive[:]) == 0 {
					m.FreedAfter = time.Since(killAt)
				}
			}
		}
	}()
	// The kill, at 30 % of the run.
	sleep(time.Until(start.Add(d * 3 / 10)))
	victim := insts[len(insts)-1]
	victim.killed.Store(true)
	_ = victim.l.Close() // stops its renewals; releases nothing
	_ = victim.al.Close()
	_ = victim.c.Close()
	killAt = time.Now()
	var killStore, killEnd float64
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	if pl, err := poll(pctx); err == nil {
		m.KilledHeld, killStore, killEnd = sum(pl.killedLive[:]), pl.now, pl.killedEnd
	}
	cancel()
	killedFlag.Store(true)
	m.Fallback += fallback(victim) // its metrics end with it
	_ = victim.mp.Shutdown(context.Background())
	sleep(time.Until(start.Add(d)))
	stop.Store(true)
	wg.Wait()
	<-sampled
	<-pollerDone
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if killStore > 0 {
		m.LeaseEnd = time.Duration(max(killedEnd, killEnd)-killStore) * time.Millisecond
	}
	for _, in := range live {
		m.Fallback += fallback(in)
	}
	// Every slot released: wait for the store's sorted sets to empty (the
	// killed instance's lapsed leases go with the keys' next Acquire or
	// the sets' expiry, a second past the lease), at most TTL + 1.5 s.
	end := time.Now()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		pl, err := poll(pctx)
		cancel()
		if err == nil {
			m.LeftMembers, m.LeftLive = pl.members, sum(pl.live[:])
			if pl.members == 0 {
				break
			}
		}
		if time.Since(end) > m.TTL+1500*time.Millisecond || ctx.Err() != nil {
			break
		}
		sleep(concPoll)
	}
	m.LeftWait = time.Since(end)
	// LeftLive counts live leases; those of the killed instance lapsed
	// long before (verdict: FreedAfter).

	for k := range concKeys {
		m.MaxHeld[k] = maxHeld[k].Load()
		m.Denied[k] = denied[k].Load()
	}
	m.StoreMax = storeMax
	m.Admitted, m.Errors, m.Abandoned = admitted.Load(), errs.Load(), abandoned.Load()
	for p := range m.Offered {
		m.Offered[p], m.Shed[p] = offered[p].Load(), shed[p].Load()
		if f := firstShed[p].Load(); f > 0 {
			m.FirstShed[p] = time.Duration(f - 1)
		}
	}
	// The adaptive limit: before the step [0.2, 0.5)·d, after it the two
	// halves of [0.7, 1)·d.
	mean := func(from, to time.Duration) float64 {
		var s float64
		var n int
		for _, x := range limits {
			if x.at >= from && x.at < to {
				s += x.est
				n++
			}
		}
		if n == 0 {
			return 0
		}
		return s / float64(n)
	}
	m.PreLimit = mean(d/5, d/2)
	m.PostLimit = [2]float64{mean(d*7/10, d*17/20), mean(d*17/20, d+time.Second)}
	settled := (m.PostLimit[0] + m.PostLimit[1]) / 2
	for _, x := range limits {
		if x.at >= d/2 && settled > 0 && math.Abs(x.est-settled) <= 0.2*settled {
			m.FollowAfter = x.at - d/2
			break
		}
	}
	return m, nil
}
