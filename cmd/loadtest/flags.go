package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/fleet"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/traffic"
	"github.com/sluicehq/sluice/internal/redisproc"
	"github.com/sluicehq/sluice/policy"
)

// Limits that keep every run bounded.
const (
	maxInstances   = 256
	maxWorkers     = 64
	maxDuration    = time.Hour // a fleet scenario
	maxSimDuration = 30 * 24 * time.Hour
	defaultRecords = 20_000_000
	// throughputRecords is the throughput profile's default budget: its
	// ThroughputDuration at 16 million checks a second (about 770 MB of
	// records), more than this project's 2-core machine makes.
	throughputRecords = 32_000_000
	maxRecords        = 200_000_000
	maxKeys           = 1 << 24
)

// options are the parsed flags.
type options struct {
	Redis        string
	Instances    int
	Procs        bool
	Workers      int
	Rule         policy.Rule
	RuleText     string
	Sync         time.Duration
	Budget       float64
	Precision    int
	Algorithm    string
	ModeText     string
	Timeout      time.Duration
	MinInstances int
	Keys         int
	Zipf         float64
	Profiles     []string
	Duration     time.Duration
	Rate         float64
	Cost         int
	Seed         uint64
	JSON         bool
	Markdown     bool
	Out          string
	Sweep        *sweep
	Sim          bool
	MaxRecords   int64
	Skew         time.Duration
	Outage       time.Duration
	Embedded     bool // without -redis: the in-process stand-in even if a redis-server is installed
	// local: the run starts a throwaway redis-server (no -redis, one in
	// PATH, neither -embedded nor -outage nor -sim); set by fillDefaults.
	local   bool
	Latency time.Duration
	Metrics string
	// meter returns instance i's MeterProvider while -metrics serves.
	meter func(i int) (metric.MeterProvider, *sdkmetric.ManualReader, error)
	// Composed holds what the composition profiles (compose.go) measured.
	Composed []composeResult
	Quiet    bool
	Wide     bool
	PNG      bool
	Child    bool
	// set holds the flags given on the command line.
	set map[string]bool
}

// sweep is a -sweep parameter and its values.
type sweep struct {
	Param  string
	Values []string
}

// sweepParams are the parameters -sweep accepts.
var sweepParams = []string{"sync", "instances", "budget", "precision", "rate", "keys"}

func (s *sweep) String() string { return s.Param + "=" + strings.Join(s.Values, ",") }

// budgetFlag accepts "0.01" or "1%". Its default is in its usage text.
type budgetFlag struct{ v *float64 }

func (b budgetFlag) String() string {
	if b.v == nil || *b.v == 0 {
		return ""
	}
	return strconv.FormatFloat(*b.v, 'g', -1, 64)
}

func (b budgetFlag) Set(s string) error {
	f, err := parseBudget(s)
	if err != nil {
		return err
	}
	*b.v = f
	return nil
}

func parseBudget(s string) (float64, error) {
	s = strings.TrimSpace(s)
	div := 1.0
	if strings.HasSuffix(s, "%") {
		s, div = strings.TrimSuffix(s, "%"), 100
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("want a fraction like 0.01 or a percentage like 1%%")
	}
	f /= div
	if math.IsNaN(f) || f <= 0 || f > 1 {
		return 0, fmt.Errorf("%s is outside (0, 1]", s)
	}
	return f, nil
}

// The flags below have a default that depends on other flags (-sim, -redis):
// their zero value records no default with the flag package (String returns
// "" until the flag is set), so that the usage text, which states the
// default, is the only place it appears; parseFlags fills it in when the flag
// was not given.

// durationFlag is a time.Duration flag whose default its usage text states.
type durationFlag struct{ v *time.Duration }

func (d durationFlag) String() string {
	if d.v == nil || *d.v == 0 {
		return ""
	}
	return d.v.String()
}

func (d durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration like 250ms or 5s")
	}
	*d.v = v
	return nil
}

// floatFlag is a float64 flag whose default its usage text states.
type floatFlag struct{ v *float64 }

func (f floatFlag) String() string {
	if f.v == nil || *f.v == 0 {
		return ""
	}
	return strconv.FormatFloat(*f.v, 'g', -1, 64)
}

func (f floatFlag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("want a number")
	}
	*f.v = v
	return nil
}

// stringFlag is a string flag whose default its usage text states.
type stringFlag struct{ v *string }

func (f stringFlag) String() string {
	if f.v == nil {
		return ""
	}
	return *f.v
}

func (f stringFlag) Set(s string) error {
	*f.v = s
	return nil
}

// Defaults of the flags whose default depends on other flags.
const (
	defaultRule     = "1000/1s"
	defaultSimRule  = "100/1m"
	defaultRate     = 8000
	defaultDuration = 5 * time.Second
	defaultSimDur   = time.Hour
	defaultBudget   = 0.01
)

// parseRule parses "100/1s", "100/s", "1000/1m", "100/min", "5/15m".
func parseRule(s string) (limit int64, window time.Duration, err error) {
	l, w, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("-rule %q: want LIMIT/WINDOW, for example 100/1s or 1000/1m", s)
	}
	limit, err = strconv.ParseInt(strings.TrimSpace(l), 10, 64)
	if err != nil || limit < 1 {
		return 0, 0, fmt.Errorf("-rule %q: the limit %q must be a positive integer", s, l)
	}
	w = strings.TrimSpace(w)
	for long, short := range map[string]string{"sec": "s", "second": "s", "min": "m", "minute": "m", "hour": "h"} {
		if strings.HasSuffix(w, long) {
			w = strings.TrimSuffix(w, long) + short
		}
	}
	if w != "" && (w[0] < '0' || w[0] > '9') && w[0] != '.' {
		w = "1" + w
	}
	window, err = time.ParseDuration(w)
	if err != nil {
		return 0, 0, fmt.Errorf("-rule %q: the window %q is not a duration (try 1s, 500ms, 1m)", s, w)
	}
	return limit, window, nil
}

// parseFlags parses and validates the command line.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{set: map[string]bool{}}
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var profiles, sweepText string
	var seed uint64
	fs.StringVar(&o.Redis, "redis", "", "Redis `URL` (redis://host:port/db), host:port, a cluster URL (redis://h1:p1?addr=h2:p2), or a comma-separated list of cluster nodes; empty: start a throwaway redis-server on loopback if one is in PATH (stopped at the end), else the embedded miniredis stand-in")
	fs.BoolVar(&o.Embedded, "embedded", false, "without -redis, run on the embedded miniredis stand-in (in process; accuracy figures hold, Redis latency does not) even if a redis-server is installed")
	fs.IntVar(&o.Instances, "instances", 4, "number of `N` limiter instances in the fleet, each with its own cache, syncer and Redis connection pool")
	fs.BoolVar(&o.Procs, "procs", false, "run each instance in its own OS process (this binary re-executed)")
	fs.IntVar(&o.Workers, "workers", 16, "goroutines issuing checks per instance, each with its own schedule (a check waiting for Redis delays only its goroutine)")
	fs.Var(stringFlag{&o.RuleText}, "rule", "the rule, `LIMIT/WINDOW`, e.g. 100/1s (default "+defaultRule+"; "+defaultSimRule+" with -sim)")
	fs.DurationVar(&o.Sync, "sync", 100*time.Millisecond, "sync interval (sluice.Options.SyncInterval)")
	fs.Var(budgetFlag{&o.Budget}, "budget", "error budget `ε` as a fraction or percentage, e.g. 0.01 or 1% (default 1%)")
	fs.IntVar(&o.Precision, "precision", policy.DefaultPrecision, "sub-windows per window of the sliding window (B)")
	fs.StringVar(&o.Algorithm, "algorithm", "sliding", "counting algorithm: `sliding|weighted|fixed|tokenbucket|gcra|slidinglog`; the buckets are measured against one exact central bucket (Burst = Limit), the log against the exact log")
	fs.StringVar(&o.ModeText, "mode", "", "where checks are decided: `eventual|strict` (default eventual; strict for slidinglog, which has no eventual mode): eventual decides locally under the error budget, strict decides every check in Redis")
	fs.Var(durationFlag{&o.Timeout}, "timeout", fmt.Sprintf("the longest time `D` a check waits for Redis (sluice.Options.Timeout) (default %v on a real Redis, the library's; %v on the embedded stand-in, which runs scripts slowly)", sluice.DefaultTimeout, embeddedTimeout))
	fs.IntVar(&o.MinInstances, "min-instances", 0, "floor under N̂ (sluice.Options.MinInstances); 0 = none")
	fs.IntVar(&o.Keys, "keys", 0, "number of keys (0 = the profile's own: 20; zipf 1000; boundary 10; startup 4; churn 20 alive at a time)")
	fs.Float64Var(&o.Zipf, "zipf", 1.0, "Zipf exponent of the key popularity (0 = uniform); boundary and churn use uniform keys")
	fs.StringVar(&profiles, "profile", "", "traffic `profiles`, comma-separated, or \"all\": "+strings.Join(traffic.Profiles, ", ")+" (default all; "+traffic.Steady+","+traffic.SyncBurst+" with -sweep; all but "+traffic.Throughput+" with -sim); also, when named, the operations profiles "+strings.Join(traffic.Operations, ", ")+" (\""+opsAlias+"\" names all four; not with -sim) and the composition profiles "+strings.Join(composeProfiles, ", "))
	fs.Var(durationFlag{&o.Duration}, "duration", fmt.Sprintf("length `D` of each scenario: every profile and sweep point runs for D (throughput at most %s), so a run takes about D times their number (default %s; %s with -sim)", durText(traffic.ThroughputDuration), durText(defaultDuration), durText(defaultSimDur)))
	fs.Var(floatFlag{&o.Rate}, "rate", fmt.Sprintf("`N` offered checks per second, whole fleet; 0 = as fast as possible (default %d; with -sim 20 × the limit per window: 2000/min for %s)", defaultRate, defaultSimRule))
	fs.IntVar(&o.Cost, "cost", 1, "each check costs 1..`N` units, uniformly (AllowN)")
	fs.Uint64Var(&seed, "seed", 1, "random seed: the same seed offers the same checks")
	fs.BoolVar(&o.JSON, "json", false, "print the report as JSON instead of tables")
	fs.BoolVar(&o.Markdown, "markdown", false, "print the tables as Markdown (every column, as with -wide)")
	fs.BoolVar(&o.Wide, "wide", false, "print every column of the tables (about 250 columns wide; without it they fit 120)")
	fs.StringVar(&o.Out, "out", "", "write plots (SVG), report.json and go-redis's own log (redis.log) to `DIR`")
	fs.StringVar(&sweepText, "sweep", "", "run each profile once per value: `PARAM=v1,v2,...` with PARAM one of "+strings.Join(sweepParams, ", ")+" (e.g. sync=10ms,100ms,1s)")
	fs.BoolVar(&o.Sim, "sim", false, "simulation: virtual clock, algorithm level, deterministic, faster than real time")
	fs.Int64Var(&o.MaxRecords, "max-records", 0, fmt.Sprintf("most checks recorded per scenario (memory bound: about 24 bytes each; default %d, and %d for the %s profile); a scenario whose budget runs out ends then", defaultRecords, throughputRecords, traffic.Throughput))
	fs.DurationVar(&o.Skew, "skew", 0, "skew instance i's clock by i×`D` (sluice.Options.Clock) to show store-clock alignment")
	fs.DurationVar(&o.Latency, "latency", 0, "delay every reply of the store by `D` (whole milliseconds), through an in-process TCP proxy (toxiproxy) on loopback: a slow store, e.g. 10× loopback Redis")
	fs.DurationVar(&o.Outage, "outage", 0, "stop the embedded store for `D` at 40% of each scenario (failure mode demo; embedded store only)")
	fs.StringVar(&o.Metrics, "metrics", "", "serve every instance's sluice metrics (OpenTelemetry, Prometheus exporter) on `ADDR`/metrics while the run lasts, e.g. 127.0.0.1:9464; loopback only, not with -procs or -sim (docs/observability.md)")
	fs.BoolVar(&o.Quiet, "quiet", false, "no progress output (neither the bar on a terminal nor the line per finished profile otherwise)")
	fs.BoolVar(&o.PNG, "png", false, "write plots as PNG instead of SVG")
	fs.BoolVar(&o.Child, fleet.ChildFlag, false, "internal: run as a -procs child")
	fs.Usage = func() { usage(fs) }
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if o.Child {
		return o, nil
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: every setting is a flag (see -h)", fs.Arg(0))
	}
	o.Seed = seed
	o.fillDefaults()
	if err := o.validate(profiles, sweepText); err != nil {
		return nil, err
	}
	return o, nil
}

// fillDefaults sets the flags not given whose default depends on others
// (their usage text states these defaults).
func (o *options) fillDefaults() {
	if !o.set["budget"] {
		o.Budget = defaultBudget
	}
	if !o.set["rule"] {
		o.RuleText = defaultRule
		if o.Sim {
			o.RuleText = defaultSimRule
		}
	}
	if !o.set["duration"] {
		o.Duration = defaultDuration
		if o.Sim {
			o.Duration = defaultSimDur
		}
	}
	if !o.set["max-records"] {
		o.MaxRecords = defaultRecords // recordsFor raises it for the throughput profile
	}
	if !o.set["rate"] && !o.Sim {
		o.Rate = defaultRate // -sim's depends on the rule: validate sets it
	}
	o.local = o.Redis == "" && !o.Sim && !o.Embedded && o.Outage == 0 && redisproc.Available()
	if !o.set["timeout"] {
		o.Timeout = sluice.DefaultTimeout
		if o.Redis == "" && !o.local {
			// The embedded stand-in runs the sync script about fifty
			// times slower than Redis; with the library's default,
			// checks at their cap would time out on the stand-in's
			// queue, not on anything the limiter does.
			o.Timeout = embeddedTimeout
		}
	}
}

// algorithms maps -algorithm's values to the rule's algorithm.
var algorithms = map[string]policy.Algorithm{
	"sliding":     policy.SlidingWindow,
	"weighted":    policy.WeightedWindow,
	"fixed":       policy.FixedWindow,
	"tokenbucket": policy.TokenBucket,
	"gcra":        policy.GCRA,
	"slidinglog":  policy.SlidingLog,
}

func (o *options) validate(profiles, sweepText string) error {
	limit, window, err := parseRule(o.RuleText)
	if err != nil {
		return err
	}
	alg, ok := algorithms[o.Algorithm]
	if !ok {
		return fmt.Errorf("-algorithm %q: use sliding, weighted, fixed, tokenbucket, gcra or slidinglog", o.Algorithm)
	}
	if o.Precision < 1 || o.Precision > policy.MaxPrecision {
		return fmt.Errorf("-precision %d: use 1 to %d sub-windows", o.Precision, policy.MaxPrecision)
	}
	o.Rule = policy.Rule{Name: "loadtest", Limit: limit, Window: window, Algorithm: alg, Mode: policy.Eventual}
	switch o.ModeText {
	case "", "eventual":
		if alg == policy.SlidingLog {
			if o.ModeText != "" {
				return fmt.Errorf("-mode eventual: a slidinglog has no eventual mode (it is exact by definition); use -mode strict")
			}
			o.Rule.Mode = policy.Strict // its fleet-wide mode: every check decided by Redis
		}
	case "strict":
		o.Rule.Mode = policy.Strict
	default:
		return fmt.Errorf("-mode %q: use eventual or strict", o.ModeText)
	}
	o.ModeText = o.Rule.Mode.String()
	switch alg {
	case policy.SlidingWindow, policy.WeightedWindow:
		o.Rule.Precision = o.Precision
	case policy.TokenBucket, policy.GCRA, policy.SlidingLog:
		if o.Sim {
			return fmt.Errorf("-algorithm %s: -sim models the window algorithms only", o.Algorithm)
		}
	}
	if err := o.Rule.Validate(); err != nil {
		return fmt.Errorf("-rule %s: %w", o.RuleText, err)
	}
	switch {
	case o.Instances < 1 || o.Instances > maxInstances:
		return fmt.Errorf("-instances %d: use 1 to %d", o.Instances, maxInstances)
	case o.Workers < 1 || o.Workers > maxWorkers:
		return fmt.Errorf("-workers %d: use 1 to %d", o.Workers, maxWorkers)
	case o.Sync < time.Millisecond:
		return fmt.Errorf("-sync %v: it must be at least 1ms", o.Sync)
	case o.Timeout <= 0:
		return fmt.Errorf("-timeout %v: it must be positive", o.Timeout)
	case o.MinInstances < 0:
		return fmt.Errorf("-min-instances %d: it must not be negative", o.MinInstances)
	case o.Keys < 0 || o.Keys > maxKeys:
		return fmt.Errorf("-keys %d: use 1 to %d (0 = the profile's default)", o.Keys, maxKeys)
	case o.Zipf < 0 || math.IsNaN(o.Zipf) || o.Zipf > 10:
		return fmt.Errorf("-zipf %v: use an exponent from 0 (uniform) to 10", o.Zipf)
	case o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) || o.Rate > 1e9:
		return fmt.Errorf("-rate %v: use 0 (as fast as possible) or a rate up to 1e9 checks/s", o.Rate)
	case o.Cost < 1 || int64(o.Cost) > limit:
		return fmt.Errorf("-cost %d: use 1 to the rule's limit %d", o.Cost, limit)
	case o.MaxRecords < record1Chunk || o.MaxRecords > maxRecords:
		return fmt.Errorf("-max-records %d: use %d to %d", o.MaxRecords, record1Chunk, maxRecords)
	case o.Skew < -10*time.Second || o.Skew > 10*time.Second:
		return fmt.Errorf("-skew %v: use at most ±10s", o.Skew)
	case o.JSON && o.Markdown:
		return errors.New("-json and -markdown exclude each other")
	}
	limitDur := maxDuration
	if o.Sim {
		limitDur = maxSimDuration
	}
	if o.Duration <= 0 || o.Duration > limitDur {
		return fmt.Errorf("-duration %v: use a positive duration up to %v", o.Duration, limitDur)
	}
	if o.Sim && !o.set["rate"] {
		o.Rate = 20 * float64(limit) / window.Seconds()
	}
	if o.Embedded && o.Redis != "" {
		return errors.New("-embedded runs on the in-process stand-in: it cannot be combined with -redis")
	}
	if o.Outage != 0 {
		if o.Redis != "" {
			return errors.New("-outage stops the embedded store: it cannot be combined with -redis")
		}
		if o.Outage < 0 || o.Outage >= o.Duration/2 {
			return fmt.Errorf("-outage %v: use a positive duration under half of -duration (%v)", o.Outage, o.Duration/2)
		}
	}
	if o.Latency != 0 && (o.Latency < time.Millisecond || o.Latency > time.Second || o.Latency%time.Millisecond != 0) {
		return fmt.Errorf("-latency %v: use whole milliseconds from 1ms to 1s", o.Latency)
	}
	if o.Metrics != "" {
		if err := checkLoopback(o.Metrics); err != nil {
			return err
		}
		if o.Procs {
			return errors.New("-metrics serves the instances of this process: it cannot be combined with -procs")
		}
	}
	if o.Sim {
		for _, f := range []string{"redis", "procs", "instances", "sync", "budget", "timeout", "min-instances", "skew", "outage", "latency", "workers", "metrics", "embedded"} {
			if o.set[f] {
				return fmt.Errorf("-%s has no meaning with -sim (the simulation models the algorithm, not the fleet)", f)
			}
		}
		if sweepText != "" {
			return errors.New("-sweep is for fleet runs; -sim already compares B = 1, 5, 10, 60 and the fixed window")
		}
	}
	if profiles == "" || profiles == "all" {
		o.Profiles = slices.Clone(traffic.Profiles)
		if sweepText != "" && profiles == "" {
			o.Profiles = []string{traffic.Steady, traffic.SyncBurst}
		}
		if o.Sim {
			// A fleet's speed has no meaning on a virtual clock.
			o.Profiles = slices.DeleteFunc(o.Profiles, func(p string) bool { return p == traffic.Throughput })
		}
	} else {
		for _, p := range strings.Split(profiles, ",") {
			p = strings.TrimSpace(p)
			names := []string{p}
			switch {
			case p == opsAlias:
				names = traffic.Operations
			case p == "all":
				names = traffic.Profiles
			case !traffic.Valid(p) && !slices.Contains(composeProfiles, p):
				return fmt.Errorf("-profile %q: use one or more of %s, or all (or the operations profiles %s, or %s for all four; or the composition profiles %s)",
					p, strings.Join(traffic.Profiles, ", "), strings.Join(traffic.Operations, ", "), opsAlias, strings.Join(composeProfiles, ", "))
			}
			for _, n := range names {
				if !slices.Contains(o.Profiles, n) {
					o.Profiles = append(o.Profiles, n)
				}
			}
		}
	}
	for _, p := range o.Profiles {
		if !traffic.IsOperation(p) {
			continue
		}
		if o.Sim {
			return fmt.Errorf("-profile %s acts on a running fleet; -sim replays an algorithm on a virtual clock", p)
		}
		if n := traffic.MinInstances(p); o.Instances < n {
			return fmt.Errorf("-profile %s moves traffic between instances: it needs -instances %d or more", p, n)
		}
	}
	if slices.Contains(o.Profiles, Concurrency) && o.Instances < 2 {
		return fmt.Errorf("-profile %s kills an instance: it needs -instances 2 or more", Concurrency)
	}
	if o.Sim && slices.Contains(o.Profiles, traffic.Throughput) {
		return errors.New("-profile throughput measures a fleet's speed; -sim replays an algorithm on a virtual clock")
	}
	if o.Rate == 0 && slices.Contains(o.Profiles, traffic.Ramp) {
		return errors.New("-profile ramp needs -rate > 0 (it ramps the rate)")
	}
	if sweepText != "" {
		s, err := parseSweep(sweepText)
		if err != nil {
			return err
		}
		o.Sweep = s
	}
	if o.Out != "" {
		if err := os.MkdirAll(o.Out, 0o755); err != nil {
			return fmt.Errorf("-out %s: %w", o.Out, err)
		}
	}
	return nil
}

// record1Chunk is the smallest -max-records.
const record1Chunk = 1 << 15

func parseSweep(s string) (*sweep, error) {
	p, vs, ok := strings.Cut(s, "=")
	if !ok || vs == "" {
		return nil, fmt.Errorf("-sweep %q: want PARAM=v1,v2,... (PARAM: %s)", s, strings.Join(sweepParams, ", "))
	}
	p = strings.TrimSpace(p)
	if !slices.Contains(sweepParams, p) {
		return nil, fmt.Errorf("-sweep %q: unknown parameter %q; use one of %s", s, p, strings.Join(sweepParams, ", "))
	}
	sw := &sweep{Param: p}
	for _, v := range strings.Split(vs, ",") {
		v = strings.TrimSpace(v)
		var err error
		switch p {
		case "sync":
			var d time.Duration
			if d, err = time.ParseDuration(v); err == nil && d < time.Millisecond {
				err = errors.New("under 1ms")
			}
		case "budget":
			_, err = parseBudget(v)
		case "rate":
			var f float64
			if f, err = strconv.ParseFloat(v, 64); err == nil && (f < 0 || math.IsNaN(f) || math.IsInf(f, 0)) {
				err = errors.New("negative")
			}
		default:
			var n int
			if n, err = strconv.Atoi(v); err == nil && n < 1 {
				err = errors.New("below 1")
			}
			if err == nil && p == "instances" && n > maxInstances {
				err = fmt.Errorf("above %d", maxInstances)
			}
			if err == nil && p == "precision" && n > policy.MaxPrecision {
				err = fmt.Errorf("above %d", policy.MaxPrecision)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("-sweep %s: bad value %q: %v", p, v, err)
		}
		sw.Values = append(sw.Values, v)
	}
	if len(sw.Values) > 20 {
		return nil, fmt.Errorf("-sweep %s: at most 20 values", p)
	}
	return sw, nil
}

// apply sets the sweep's value i on o (validated by parseSweep).
func (s *sweep) apply(o *options, i int) {
	v := s.Values[i]
	switch s.Param {
	case "sync":
		o.Sync, _ = time.ParseDuration(v)
	case "budget":
		o.Budget, _ = parseBudget(v)
	case "rate":
		o.Rate, _ = strconv.ParseFloat(v, 64)
	case "instances":
		o.Instances, _ = strconv.Atoi(v)
	case "keys":
		o.Keys, _ = strconv.Atoi(v)
	case "precision":
		o.Precision, _ = strconv.Atoi(v)
		if a := o.Rule.Algorithm; a == policy.SlidingWindow || a == policy.WeightedWindow {
			o.Rule.Precision = o.Precision
		}
	}
}

// numeric returns value i as a number for plots.
func (s *sweep) numeric(i int) float64 {
	v := s.Values[i]
	switch s.Param {
	case "sync":
		d, _ := time.ParseDuration(v)
		return d.Seconds() * 1000 // ms
	case "budget":
		f, _ := parseBudget(v)
		return f * 100 // %
	}
	f, _ := strconv.ParseFloat(v, 64)
	return f
}

// durationFor returns how long a profile's scenario runs: -duration, and
// at most traffic.ThroughputDuration for the throughput profile.
func (o *options) durationFor(profile string) time.Duration {
	if profile == traffic.Throughput {
		return min(o.Duration, traffic.ThroughputDuration)
	}
	return o.Duration
}

// recordsFor returns a profile's record budget: -max-records if given; by
// default defaultRecords, and throughputRecords for the throughput profile,
// whose unpaced workers record millions of checks a second.
func (o *options) recordsFor(profile string) int64 {
	if profile == traffic.Throughput && !o.set["max-records"] {
		return throughputRecords
	}
	return o.MaxRecords
}

// keysFor returns the number of keys a profile uses.
func (o *options) keysFor(profile string) int {
	if o.Keys > 0 {
		return o.Keys
	}
	if traffic.IsOperation(profile) {
		return traffic.OpKeys(profile)
	}
	switch profile {
	case traffic.Zipf:
		return 1000
	case traffic.Boundary:
		return 10
	case traffic.Startup:
		return 4
	}
	return 20
}

func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `loadtest: the bundled load test of sluice.

It runs a fleet of sluice.Limiters against one Redis, offers them traffic from
the profiles below, records every decision, and measures them against an exact
sliding log (over-admission, utilization, false denials, wrong decisions) and
against the same algorithm run centrally (the fleet's own error), with
throughput, latency and Redis traffic. With no flags it starts an embedded
Redis stand-in (miniredis) and runs every profile for 5s (throughput, every
worker flat out, for 2s); after the steady and throughput scenarios, the same
workers check bare local limiters, for comparison.

Usage:
  go run ./cmd/loadtest [flags]
  go run ./cmd/loadtest -redis redis://127.0.0.1:6380 -instances 8 -profile steady,boundary -duration 10s
  go run ./cmd/loadtest -sweep sync=10ms,100ms,1s -out out/
  go run ./cmd/loadtest -sim -out out/

Profiles:
`)
	for _, p := range traffic.Profiles {
		fmt.Fprintf(w, "  %-11s %s\n", p, traffic.Describe(p))
	}
	fmt.Fprintf(w, `
Operations profiles, run only when named (-profile %s runs all four). Each offers
a few keys on a regular schedule, whatever -rate and -cost: half quiet (at most
0.8·L in any window: any denial is a false denial), half hot (2.2·L per window:
over-admission and utilization), each check costing 1; the verdict also judges
that no check returned an error, and the notes give each key's denials:
`, opsAlias)
	for _, p := range traffic.Operations {
		fmt.Fprintf(w, "  %-11s %s\n", p, traffic.Describe(p))
	}
	fmt.Fprint(w, "\nFlags:\n")
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == fleet.ChildFlag {
			return
		}
		name, use := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  -%s", f.Name)
		if name != "" {
			fmt.Fprintf(w, " %s", name)
		}
		fmt.Fprintf(w, "\n    \t%s", strings.ReplaceAll(use, "\n", "\n    \t"))
		if !zeroDefault(f.DefValue) {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// zeroDefault reports whether a flag's recorded default means "none" and is
// not shown: a zero value, or a flag whose usage text states its default.
func zeroDefault(v string) bool {
	switch v {
	case "", "0", "0s", "false":
		return true
	}
	return false
}

// durText formats a duration without trailing zero units: 1h, 1m30s, 250ms.
func durText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
