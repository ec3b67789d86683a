package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/fleet"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/oracle"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/record"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/report"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/store"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/traffic"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/keyname"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
)

// fleetConfig builds the fleet configuration of one scenario.
func fleetConfig(o *options, profile string, target store.Target, prefix, runID string) fleet.Config {
	rule := o.Rule
	if rule.Algorithm == policy.SlidingWindow || rule.Algorithm == policy.WeightedWindow {
		rule.Precision = o.Precision
	}
	sub := rulegeo.SubWindow(rule)
	cfg := fleet.Config{
		Target:       target,
		Rule:         rule,
		SyncInterval: o.Sync,
		ErrorBudget:  o.Budget,
		Timeout:      o.Timeout,
		MinInstances: o.MinInstances,
		Prefix:       prefix,
		RunID:        runID,
		MaxRecords:   o.recordsFor(profile),
		Procs:        o.Procs,
		Skew:         o.Skew,
		Meter:        o.meter,
		Traffic: traffic.Params{
			Profile:   profile,
			Rate:      o.Rate,
			Duration:  o.durationFor(profile),
			Window:    rule.Window,
			Sub:       sub,
			Limit:     rule.Limit,
			Keys:      o.keysFor(profile),
			Zipf:      o.Zipf,
			MaxCost:   o.Cost,
			Instances: o.Instances,
			Workers:   o.Workers,
			Sync:      o.Sync,
			Seed:      o.Seed,
		},
	}
	if tp := &cfg.Traffic; traffic.IsOperation(profile) {
		// An operations profile offers its keys on its own schedule,
		// each check costing 1.
		tp.MaxCost = 1
		tp.Rate = tp.OpRate()
	}
	return cfg
}

// ruleText describes a rule: "100/1s sliding B=10".
func ruleText(r policy.Rule) string {
	switch r.Algorithm {
	case policy.FixedWindow:
		return fmt.Sprintf("%d/%v fixed", r.Limit, r.Window)
	case policy.TokenBucket, policy.GCRA, policy.SlidingLog:
		return fmt.Sprintf("%d/%v %v %v", r.Limit, r.Window, r.Algorithm, r.Mode)
	}
	return fmt.Sprintf("%d/%v %v B=%d", r.Limit, r.Window, r.Algorithm, rulegeo.Buckets(r))
}

// runScenario runs one profile on the fleet and measures it.
func runScenario(ctx context.Context, o *options, profile, sweep string, target store.Target, prefix, runID string, progress func(float64), hooks []fleet.Hooks) (*report.Scenario, error) {
	cfg := fleetConfig(o, profile, target, prefix, runID)
	if err := cfg.Traffic.Validate(); err != nil {
		return nil, err
	}
	var opsNotes func() []string
	if traffic.IsOperation(profile) {
		more, done, err := opsSetup(&cfg, target)
		if err != nil {
			return nil, err
		}
		hooks = append(hooks, more...)
		opsNotes = done
	}
	before := sampleCPU()
	res, err := fleet.Run(ctx, cfg, progress, hooks...)
	machine := machineBetween(before, sampleCPU())
	var notes []string
	if opsNotes != nil {
		notes = opsNotes()
	}
	if res == nil {
		return nil, err
	}
	defer cleanupRedis(target, prefix)
	sc := &report.Scenario{
		Name: profile,
		Settings: report.Settings{
			Profile: profile, Rule: ruleText(cfg.Rule), Limit: cfg.Rule.Limit, Window: cfg.Rule.Window,
			Algorithm: cfg.Rule.Algorithm.String(), Precision: rulegeo.Buckets(cfg.Rule),
			SyncInterval: cfg.SyncInterval, ErrorBudget: cfg.ErrorBudget, Instances: cfg.Traffic.Instances,
			Workers: cfg.Traffic.Workers, Procs: cfg.Procs, Keys: cfg.Traffic.Keys, Zipf: cfg.Traffic.Zipf,
			Rate: cfg.Traffic.Rate, Duration: cfg.Traffic.Duration, Seed: cfg.Traffic.Seed, Sweep: sweep,
			Paced: cfg.Traffic.Paced(), Operation: traffic.IsOperation(profile),
		},
		Notes:   notes,
		Machine: machine,
	}
	if !target.Embedded {
		sc.Cost.RedisBytesPerKey = redisBytesPerKey(target, prefix, cfg.Rule, res.Records)
	}
	fillCost(sc, res, &cfg)
	if f := os.Getenv("LOADTEST_DUMP"); f != "" {
		dump(f+"-"+profile+".csv", res.Records)
	}
	op := oracle.Params{Geometry: cfg.Geometry(), Limit: cfg.Rule.Limit, Algorithm: cfg.Rule.Algorithm, Burst: cfg.Rule.Burst}
	if profile == traffic.Throughput {
		// Flat out, a run of two windows ends mid-cycle: judge
		// utilization on the windows wholly inside the run.
		op.WholeWindows = oracle.Span{From: res.StoreT0, To: res.StoreT0 + int64(ranUntil(res, &cfg))}
	}
	if traffic.IsOperation(profile) {
		sc.Notes = append(sc.Notes, opsKeysNote(&cfg.Traffic, res.Records))
	}
	if profile == traffic.Deploy {
		n := 0
		for _, in := range res.Instances {
			n += in.Replaced
		}
		sc.Notes = append(sc.Notes, fmt.Sprintf("deploy: %d of %d instances replaced while running (each closed, and a new limiter with a new InstanceID started in its place after a pause; its traffic went to the others meanwhile)", n, cfg.Traffic.Instances))
	}
	a := oracle.Analyze(res.Records, op)
	fillWaits(sc, res, a)
	switch cfg.Rule.Algorithm {
	case policy.TokenBucket, policy.GCRA:
		sc.Notes = append(sc.Notes, "a bucket's over-admission is measured against its bound Burst + r·τ: per key, the most admitted in any interval τ less r·τ, ÷ Burst (= L) − 1; the exact reference and the central algorithm are one exact bucket replaying the merged stream")
	case policy.SlidingLog:
		sc.Notes = append(sc.Notes, "the exact reference and the central algorithm are both the exact sliding log replaying the merged stream")
	}
	if !cfg.Windowed() {
		sc.Notes = append(sc.Notes, "decision times are the store time at the middle of each call (a check the store decides is decided in Redis during the call): they err by up to half the call's latency, so checks decided within that of each other may be replayed out of order, which the replay counts as over-admission or wrong decisions")
	}
	sc.Accuracy = a.Summary
	if s := a.Summary; s.UtilizationWhole && s.HotKeys == 0 && s.LimitedKeys > 0 {
		sc.Notes = append(sc.Notes, fmt.Sprintf("utilization is judged on the windows wholly inside the run, and the run (%v) holds none: not judged", ranUntil(res, &cfg)))
	}
	if s := a.Summary; s.FalseDenialKeys > 0 {
		note := fmt.Sprintf("%d of %d keys never offered above 0.9·L in a window were denied; the %v run centrally denies %d of them", s.FalseDenialKeys, s.QuietKeys, cfg.Rule.Algorithm, s.AlgoFalseDenialKeys)
		if cfg.Rule.Algorithm == policy.SlidingWindow && s.SpanQuietKeys > 0 {
			note += fmt.Sprintf("; of the keys never offered above 0.9·L in W plus one sub-window (a sliding window counts a sub-window whole until it has left the window), %d of %d were denied", s.SpanFalseDenialKeys, s.SpanQuietKeys)
		}
		sc.Notes = append(sc.Notes, note)
	}
	if s := a.Summary; s.HotKeys > 0 && s.UtilizationMin < report.MinUtilization && s.AlgoUtilizationMin < report.MinUtilization {
		sc.Notes = append(sc.Notes, utilizationNote(s.UtilizationMin, s.AlgoUtilizationMin, cfg.Rule.Algorithm))
	}
	var urgent int64
	for _, in := range res.Instances {
		urgent += in.Sync.UrgentCycles
	}
	sc.Cost.UrgentPerWindow = float64(urgent) / (cfg.Traffic.Duration.Seconds() / cfg.Rule.Window.Seconds())
	key := a.Summary.WorstKey
	if key < 0 {
		key = a.Summary.HottestKey
	}
	sc.SeriesKey = key
	if key >= 0 {
		step := max(cfg.Rule.Window/200, time.Millisecond)
		if s, ok := a.Series(uint32(key), res.StoreT0, res.StoreT0+int64(cfg.Traffic.Duration), step); ok {
			sc.Series = &s
		}
	}
	nhat := int64(max(cfg.Traffic.Instances, cfg.MinInstances))
	if capv := int64(math.Floor(cfg.ErrorBudget * float64(cfg.Rule.Limit) / float64(nhat+1))); capv == 0 {
		sc.Notes = append(sc.Notes, fmt.Sprintf("ε·L/(N̂+1) = %.2g < 1: the divergence cap is 0, so a check is decided locally only on a lease: a key's first check on each instance, and every check of a key too rarely checked to hold one, is decided by Redis (batched); raise the limit or ε for a cap", cfg.ErrorBudget*float64(cfg.Rule.Limit)/float64(nhat+1)))
	}
	if sc.Cost.TimedOut > 0 {
		sc.Notes = append(sc.Notes, fmt.Sprintf("%s of the sampled checks waited the whole -timeout %v for Redis (such a check is then decided by the failure mode: under fail-local, within its instance's part of the room, or its share L/N̂ if its key has no local state)", pctText(sc.Cost.TimedOut), cfg.Timeout))
	}
	if res.Truncated {
		sc.Notes = append(sc.Notes, truncatedNote(cfg.MaxRecords, res.EndedAt, cfg.Traffic.Duration, cfg.Procs))
	}
	if sc.Cost.Errors > 0 {
		msg := ""
		for _, in := range res.Instances {
			if in.ErrorMsg != "" {
				msg = in.ErrorMsg
				break
			}
		}
		sc.Notes = append(sc.Notes, fmt.Sprintf("%d checks returned an error (first: %s)", sc.Cost.Errors, msg))
	}
	if lag := time.Duration(sc.Cost.MaxLag); lag > cfg.Rule.Window/10 && o.Rate > 0 {
		sc.Notes = append(sc.Notes, fmt.Sprintf("the workers fell up to %v behind the schedule: the machine could not offer the asked rate", lag.Round(time.Millisecond)))
	}
	if sc.Cost.Ambiguous > 0 {
		sc.Notes = append(sc.Notes, ambiguousNote(sc.Cost.Ambiguous, sc.Cost.AmbiguousAdmitted, cfg.Geometry().Span() == 1))
	}
	if sc.Cost.Degraded {
		sc.Notes = append(sc.Notes, "an instance saw the store as unreachable (failure mode in force) during the run")
	}
	res.Records = nil
	return sc, err
}

// peerProfiles are the profiles whose scenarios are followed by the bare
// local limiters (fleet.Peers): a paced one and the flat-out one.
var peerProfiles = []string{traffic.Steady, traffic.Throughput}

// peerDuration is how long each peer is checked flat out: the scenario's
// first half second (tens of thousands of timed checks), or all of it if
// shorter. Paced, a peer runs the whole scenario (peerFor), so that its
// p99.9 rests on as many timed checks as sluice's.
const peerDuration = time.Second / 2

// peerFor returns how long each peer is checked after scenario sc.
func peerFor(sc *report.Scenario) time.Duration {
	if sc.Settings.Paced {
		return sc.Settings.Duration
	}
	return peerDuration
}

// runPeers checks the bare local limiters with the scenario's workers,
// schedule and keys, one after the other, and adds their figures to sc.
// Not for a sweep's points (the same profile many times) or -procs (the
// peers run in this process).
func runPeers(ctx context.Context, o *options, sc *report.Scenario) error {
	if !slices.Contains(peerProfiles, sc.Settings.Profile) || o.Sweep != nil || o.Procs {
		return nil
	}
	cfg := fleetConfig(o, sc.Settings.Profile, store.Target{}, "", "")
	for _, peer := range fleet.Peers {
		runtime.GC() // the scenario's records are garbage now: not during the peer
		pr, err := fleet.RunPeer(ctx, cfg, peer, peerFor(sc))
		if err != nil {
			return fmt.Errorf("peer %s: %w", peer, err)
		}
		sc.Peers = append(sc.Peers, report.Peer{Name: pr.Peer, Duration: report.Dur(pr.Duration), Checks: pr.Checks,
			ChecksPerSec: float64(pr.Checks) / pr.Duration.Seconds(), Latency: pr.Latency, Every: pr.Every})
	}
	return nil
}

// truncatedNote says that a scenario ended by its record budget, not by its
// clock.
func truncatedNote(budget int64, at, d time.Duration, procs bool) string {
	if procs {
		return fmt.Sprintf("the record budget (-max-records %d, split over the processes) ran out: an instance's workers stopped at %v of %v, "+
			"the others when their own share ran out or at the end; checks/s are over the time the instances ran", budget, at.Round(time.Millisecond), d)
	}
	return fmt.Sprintf("the scenario ended by its record budget (-max-records %d), not by its clock: every worker stopped at %v of %v; "+
		"checks/s are over the %v the fleet ran, and the accuracy covers those checks", budget, at.Round(time.Millisecond), d, at.Round(time.Millisecond))
}

// ambiguousNote explains the checks whose decision time is known only
// modulo a period (record.Record.Early).
func ambiguousNote(checks, admitted int64, fixed bool) string {
	period := "sub-window"
	if fixed {
		period = "window"
	}
	return fmt.Sprintf("%d checks (%d admitted) took longer than about a quarter %s from the clock read before the call to the one after it "+
		"(waiting for Redis or for a CPU), so their decision times, recovered from Decision.ResetAfter modulo a %s, could be any of several %ss apart: "+
		"they are recorded at the latest, and the fleet's over-admission and own estimate count an admitted one only in the windows that hold every time it could have been decided at",
		checks, admitted, period, period, period)
}

// fillCost computes throughput, latency and sync traffic.
func fillCost(sc *report.Scenario, res *fleet.Result, cfg *fleet.Config) {
	c := &sc.Cost
	var lat, cycle fleet.Hist
	var sum fleet.Counters
	var serving float64
	c.NHatMin = 1 << 62
	omin, omax := time.Duration(1<<62), time.Duration(-1<<62)
	for _, in := range res.Instances {
		if in.OffsetMax >= in.OffsetMin {
			omin, omax = min(omin, in.OffsetMin), max(omax, in.OffsetMax)
		}
		c.Checks += in.Checks
		c.Errors += in.Errors
		lat.Merge(&in.Latency)
		cycle.Merge(&in.Cycle)
		sum = sum.Add(in.Sync)
		secs := in.Active.Seconds()
		serving += secs
		if secs > 0 {
			c.PerInstance = append(c.PerInstance, float64(in.Checks)/secs)
		}
		c.CycleKeys = max(c.CycleKeys, in.CycleKeys)
		if in.NHatMax > 0 {
			c.NHatMin = min(c.NHatMin, in.NHatMin)
			c.NHatMax = max(c.NHatMax, in.NHatMax)
		}
		c.MaxLag = max(c.MaxLag, report.Dur(in.MaxLag))
		c.MaxSkew = max(c.MaxSkew, report.Dur(in.MaxSkew))
		c.Degraded = c.Degraded || in.Degraded
		c.Ambiguous += in.Ambiguous
		c.AmbiguousAdmitted += in.AmbiguousAdmitted
	}
	if c.NHatMax == 0 {
		c.NHatMin = 0
	}
	if omax >= omin {
		c.ClockSpread = report.Dur(omax - omin)
	}
	c.ChecksPerSec = float64(c.Checks) / ran(res, cfg).Seconds()
	c.LatencyMax = report.Dur(lat.Max)
	c.LatencySample = lat.N
	c.TimedOut = lat.ShareAtLeast(int64(cfg.Timeout))
	if serving > 0 {
		c.CommandsPerSec = float64(sum.Commands) / serving
		c.RoundTripsPerSec = float64(sum.RoundTrips) / serving
		c.KeySyncsPerSec = float64(sum.KeySyncs) / serving
		c.UrgentPerSec = float64(sum.UrgentCycles) / serving
		c.ReservationsPerSec = float64(sum.Reservations) / serving
	}
	c.Failures = sum.Failures
	c.CycleP50 = report.Dur(cycle.Quantile(0.5))
	c.CycleMax = report.Dur(cycle.Max)
	c.Truncated = res.Truncated
	c.Wall = report.Dur(res.Wall)
}

// ranUntil returns the offset at which a scenario ended: its duration, or
// when its record budget ran out (the first instance's, with -procs).
func ranUntil(res *fleet.Result, cfg *fleet.Config) time.Duration {
	if res.Truncated && res.EndedAt > 0 {
		return min(res.EndedAt, cfg.Traffic.Duration)
	}
	return cfg.Traffic.Duration
}

// fillWaits counts which checks waited for Redis, and why, from the
// instances' metrics and stats, and the latency split of the oracle.
func fillWaits(sc *report.Scenario, res *fleet.Result, a *oracle.Analysis) {
	w := &sc.Waits
	var p fleet.Paths
	var sync fleet.Counters
	for i, in := range res.Instances {
		if i == 0 {
			p = in.Paths
		} else {
			p = p.Add(in.Paths)
		}
		sync = sync.Add(in.Sync)
	}
	w.Read = p.Read
	w.Checks, w.Local, w.Urgent, w.Untracked, w.Strict, w.Fallback = p.Checks(), p.Local, p.Urgent, p.Untracked, p.Strict, p.Fallback
	w.UrgentCycles, w.Reservations, w.EarlySyncs, w.Why = sync.UrgentCycles, sync.Reservations, sync.EarlySyncs, sync.Waits
	w.Latency = a.Latency
	w.Every = 1 // every check of a paced profile is timed; 1 in 64 flat out
	if n := a.Latency.All.N; n > 0 && a.Latency.Checks > int64(n) {
		w.Every = int(math.Round(float64(a.Latency.Checks) / float64(n)))
	}
	c := &sc.Cost
	c.LatencyP50, c.LatencyP99, c.LatencyP999 = report.Dur(a.Latency.All.P50), report.Dur(a.Latency.All.P99), report.Dur(a.Latency.All.P999)
}

// ran returns how long the fleet served a scenario: its duration, or, if a
// record budget ended it early, until the last instance stopped.
func ran(res *fleet.Result, cfg *fleet.Config) time.Duration {
	if !res.Truncated {
		return cfg.Traffic.Duration
	}
	var d time.Duration
	for _, in := range res.Instances {
		join, _ := cfg.Traffic.Lifetime(in.Index)
		d = max(d, time.Duration(join)+in.Active)
	}
	if d <= 0 {
		return cfg.Traffic.Duration
	}
	return min(d, cfg.Traffic.Duration)
}

// localBytesPerKey measures the heap growth per key of a limiter's local
// cache: a limiter without a store, n distinct keys checked once (the bound
// twice n: below half of it every new key gets an entry at once).
func localBytesPerKey(rule policy.Rule, n int) float64 {
	rule.Mode = policy.Local
	l, err := sluice.New(sluice.Options{MaxKeys: 2*n + 2}, rule)
	if err != nil {
		return 0
	}
	defer l.Close()
	keys := fleet.KeyNames(n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ctx := context.Background()
	for _, k := range keys {
		_, _ = l.Allow(ctx, rule.Name, k)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keys)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

// redisKeyName is the Redis key of a limiter key (docs/design.md, "Redis
// layout"); the syncer does not export it for a rule outside a limiter.
func redisKeyName(prefix string, rule policy.Rule, key string) string {
	switch rule.Algorithm {
	case policy.TokenBucket, policy.GCRA:
		return string(keyname.Encode([]byte(keyname.Tag(prefix, rule.Name)), key)) + "}" + keyname.GCRA(int64(rule.Interval()), rule.MaxCost())
	case policy.SlidingLog:
		return string(keyname.Encode([]byte(keyname.Tag(prefix, rule.Name)), key)) + "}" + keyname.Log(rule.Window.Microseconds())
	}
	return keyname.Window(prefix, rule.Name, key, engine.WindowGeometry(rule))
}

// redisBytesPerKey averages MEMORY USAGE over up to 64 keys of the run.
func redisBytesPerKey(t store.Target, prefix string, rule policy.Rule, recs []record.Record) float64 {
	seen := map[uint32]bool{}
	for i := len(recs) - 1; i >= 0 && len(seen) < 64; i-- {
		seen[recs[i].Key] = true
	}
	keys := make([]int, 0, len(seen))
	for k := range seen {
		keys = append(keys, int(k))
	}
	sort.Ints(keys)
	c := t.Client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var sum, n int64
	for _, k := range keys {
		b, err := c.MemoryUsage(ctx, redisKeyName(prefix, rule, "k"+strconv.Itoa(k)), 0).Result()
		if err != nil {
			continue // expired, or not supported
		}
		sum += b
		n++
	}
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n)
}

// cleanupRedis deletes the run's registry key and the store's epoch beside
// it, which has no TTL (limiter keys expire by themselves within a window
// and a second).
func cleanupRedis(t store.Target, prefix string) {
	c := t.Client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.Del(ctx, prefix+":instances").Err()
	_ = c.Del(ctx, prefix+":epoch{"+prefix+":instances}").Err()
}

func pctText(f float64) string {
	if f < 0.001 {
		return fmt.Sprintf("%.3f%%", 100*f)
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

// dump writes records as CSV, for diagnosis (LOADTEST_DUMP=prefix).
func dump(file string, recs []record.Record) {
	f, err := os.Create(file)
	if err != nil {
		return
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	defer w.Flush()
	fmt.Fprintln(w, "t,key,cost,inst,flags,early,lat")
	for _, r := range recs {
		fmt.Fprintf(w, "%d,%d,%d,%d,%d,%d,%d\n", r.T, r.Key, r.Cost, r.Inst, r.Flags, r.Early, r.Lat)
	}
}

// utilizationNote explains a lowest utilization, fleet, below the promise
// when the algorithm run centrally on the same checks, algo, is below it
// too: the fleet's loss is the algorithm's own if fleet is within report.OwnLoss
// of algo; else the points between are the fleet's.
func utilizationNote(fleet, algo float64, alg policy.Algorithm) string {
	note := fmt.Sprintf("the lowest utilization, %s, is the algorithm's own: the %v run centrally on the same checks gets %s", pctText(fleet), alg, pctText(algo))
	if fleet < algo-report.OwnLoss {
		note = fmt.Sprintf("the lowest utilization, %s, is below the algorithm's own: the %v run centrally on the same checks gets %s, so %.1f points are the fleet's", pctText(fleet), alg, pctText(algo), 100*(algo-fleet))
	}
	if alg == policy.SlidingWindow {
		note += " (a sliding window frees a sub-window only once all of it has left the window; an exact log frees each request as it leaves)"
	}
	return note
}

// opsKeysNote says, per key of an operations profile, its pattern and how
// many of its checks were denied.
func opsKeysNote(tp *traffic.Params, recs []record.Record) string {
	denied := make([]int64, tp.Keys)
	checks := make([]int64, tp.Keys)
	for i := range recs {
		r := &recs[i]
		if int(r.Key) >= tp.Keys {
			continue
		}
		checks[r.Key]++
		if r.Flags&record.Allowed == 0 {
			denied[r.Key]++
		}
	}
	parts := make([]string, tp.Keys)
	for k := range parts {
		parts[k] = fmt.Sprintf("k%d (%s) %d of %d", k, tp.Pattern(k), denied[k], checks[k])
	}
	return "denied per key (pattern): " + strings.Join(parts, "; ")
}
