package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/keyname"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
)

// inspectTimeout bounds inspect's whole conversation with the store.
const inspectTimeout = 10 * time.Second

// pings is how many PINGs inspect times: it reports the fastest and the
// slowest.
const pings = 3

// report is what inspect prints: in text by default, as JSON with -json.
type report struct {
	Files     []fileReport   `json:"files"`
	Store     *storeReport   `json:"store,omitempty"`
	Instances []instanceInfo `json:"instances"`
	Key       *keyReport     `json:"key,omitempty"`
}

// fileReport is one configuration file and its rules.
type fileReport struct {
	Path   string       `json:"path"`
	Format string       `json:"format"`
	Domain string       `json:"domain,omitempty"`
	Rules  []ruleReport `json:"rules"`
}

// ruleReport is one rule, as the file declares it.
type ruleReport struct {
	Name          string  `json:"name"`
	Algorithm     string  `json:"algorithm"`
	Mode          string  `json:"mode"`
	Limit         int64   `json:"limit"`
	Window        string  `json:"window"`
	WindowSeconds float64 `json:"window_seconds"`
	Precision     int     `json:"precision,omitempty"`  // sub-windows of a sliding or weighted window
	Burst         int64   `json:"burst,omitempty"`      // a token bucket's or GCRA's
	Shadow        bool    `json:"shadow,omitempty"`     // a dry run
	Deny          bool    `json:"deny,omitempty"`       // denies every check
	Overrides     int     `json:"overrides,omitempty"`  // override tiers
	Capacity      string  `json:"capacity,omitempty"`   // an elastic rule's shared capacity
	Ceiling       int64   `json:"ceiling,omitempty"`    // and the most a key may reach
	SoftFraction  float64 `json:"soft,omitempty"`       // the soft band
	StoreNote     string  `json:"store_note,omitempty"` // why inspect reads no count of its keys
}

// storeReport is the store's health, as inspect saw it.
type storeReport struct {
	Redis  string `json:"redis"`
	Prefix string `json:"prefix"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	// PingMinMs and PingMaxMs are the fastest and slowest of the PINGs'
	// round trips, in milliseconds.
	PingMinMs float64 `json:"ping_min_ms"`
	PingMaxMs float64 `json:"ping_max_ms"`
	// Time is the store's clock (TIME), which the fleet's windows follow.
	Time    time.Time `json:"time"`
	Version string    `json:"version,omitempty"`
}

// instanceInfo is one live instance of the fleet's registry.
type instanceInfo struct {
	ID string `json:"id"`
	// ExpiresInSeconds is how long until the instance leaves the registry
	// if it does not heartbeat again.
	ExpiresInSeconds float64 `json:"expires_in_seconds"`
}

// keyReport is one key's fleet count, read from the store.
type keyReport struct {
	Rule     string `json:"rule"`
	Key      string `json:"key"`
	RedisKey string `json:"redis_key,omitempty"`
	Limit    int64  `json:"limit"`
	// InFlight reports a key of an in-flight rule: Count is the slots held
	// across the fleet (leases not expired), and nothing resets.
	InFlight bool `json:"in_flight,omitempty"`
	// Count is the fleet's count in the window: the buckets counted whole.
	Count int64 `json:"count"`
	// Weighted is the oldest bucket's share of a weighted window (0
	// otherwise): the estimate is Count + Weighted.
	Weighted  float64 `json:"weighted,omitempty"`
	Remaining int64   `json:"remaining"`
	// ResetAfterSeconds is how long until the window holds none of the
	// counts it holds now: the key is whole again if nothing more is
	// counted.
	ResetAfterSeconds float64 `json:"reset_after_seconds"`
	// Buckets are the counts of the buckets inside the window, oldest
	// first (bucket index: ⌊store time / sub-window⌋).
	Buckets []bucket `json:"buckets"`
	// Note says why there is no count: a rule the store does not count, or
	// a key without a limit.
	Note string `json:"note,omitempty"`
}

// bucket is one bucket's fleet count.
type bucket struct {
	Index int64 `json:"index"`
	Count int64 `json:"count"`
}

// stringsFlag is a flag that may be given more than once.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }

func (s *stringsFlag) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// runInspect prints the rules in force, the fleet's registry and store
// health, and one key's fleet count.
func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runInspectEnv(ctx, args, os.LookupEnv, stdout, stderr)
}

// runInspectEnv is runInspect with the environment variables env gives
// (the runtime layout's).
func runInspectEnv(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	var configs stringsFlag
	fs := newFlagSet("inspect", stderr)
	fs.Var(&configs, "config", "a configuration `FILE` (envoy's format or sluice's); more than one: repeat the flag")
	redisURL := fs.String("redis", "", "the shared Redis `URL` (redis://host:port or host:port)")
	cluster := fs.Bool("redis-cluster", false, "-redis names a Redis Cluster node")
	prefix := fs.String("prefix", sluice.DefaultPrefix, "the Redis key prefix the fleet shares")
	domain := fs.String("domain", "", "the envoy `DOMAIN` of a KEY=VALUE descriptor (default: the first file that matches it)")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	rf := registerRuntime(fs, env)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	rt, isRuntime, err := rf.dir()
	if err != nil {
		fmt.Fprintln(stderr, "sluice inspect:", err)
		return exitUsage
	}
	switch {
	case len(configs) == 0 && isRuntime:
		// serve's runtime layout: the files it would read.
		st, err := rt.poll()
		if err != nil {
			fmt.Fprintln(stderr, "sluice inspect:", err)
			return exitError
		}
		for _, f := range st.files {
			configs = append(configs, filepath.Join(st.target, f.name))
		}
		if len(configs) == 0 {
			fmt.Fprintf(stderr, "sluice inspect: no configuration file (*.yaml, *.yml) in %s\n", rt.path())
			return exitError
		}
	case len(configs) == 0:
		fmt.Fprintln(stderr, "sluice inspect: -config FILE is required (or the runtime directory: -runtime-root DIR, env RUNTIME_ROOT)")
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) > 0 && *redisURL == "" {
		fmt.Fprintln(stderr, "sluice inspect: a key's fleet count is read from the store: give -redis")
		return exitUsage
	}
	var rep report
	var cfgs []policy.Config
	for _, path := range configs {
		cfg, err := policy.LoadFile(path)
		if err != nil {
			fmt.Fprintln(stderr, "sluice inspect:", err)
			return exitError
		}
		cfgs = append(cfgs, cfg)
		rep.Files = append(rep.Files, describeFile(path, cfg, *redisURL != ""))
	}
	var rule policy.Rule
	var key string
	if len(rest) > 0 {
		var msg string
		var code int
		rule, key, msg, code = resolveKey(cfgs, *domain, rest)
		if code != exitOK {
			fmt.Fprintln(stderr, "sluice inspect:", msg)
			return code
		}
		if msg != "" {
			rep.Key = &keyReport{Key: strings.Join(rest, ","), Note: msg}
		}
	}
	code := exitOK
	if *redisURL != "" {
		rdb, err := newRedis(*redisURL, *cluster)
		if err != nil {
			fmt.Fprintln(stderr, "sluice inspect:", err)
			return exitUsage
		}
		defer func() { _ = rdb.Close() }()
		ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
		defer cancel()
		in := inspector{rdb: rdb, prefix: *prefix}
		rep.Store = in.health(ctx)
		rep.Store.Redis = redactURL(*redisURL)
		if !rep.Store.OK {
			code = exitError
		} else {
			now := rep.Store.Time.UnixNano()
			if rep.Instances, err = in.instances(ctx, now); err != nil {
				rep.Store.Error = err.Error()
				code = exitError
			}
			if rule.Name != "" && code == exitOK {
				if rep.Key, err = in.key(ctx, rule, key, now); err != nil {
					rep.Store.Error = err.Error()
					code = exitError
				}
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if rep.Instances == nil {
			rep.Instances = []instanceInfo{}
		}
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "sluice inspect:", err)
			return exitError
		}
	} else {
		printReport(stdout, rep)
	}
	return code
}

// describeFile is cfg's rules as inspect reports them; store tells whether
// a store is given (rules of the default mode are then Eventual).
func describeFile(path string, cfg policy.Config, store bool) fileReport {
	fr := fileReport{Path: path, Format: cfg.Format.String(), Domain: cfg.Domain, Rules: []ruleReport{}}
	for _, r := range cfg.Rules {
		mode := r.Mode
		if mode == policy.ModeDefault {
			mode = policy.Local
			if store {
				mode = policy.Eventual
			}
		}
		rr := ruleReport{
			Name: r.Name, Algorithm: r.Algorithm.String(), Mode: mode.String(),
			Limit: r.Limit, Window: r.Window.String(), WindowSeconds: r.Window.Seconds(),
			Burst: r.Burst, Shadow: r.Shadow, Deny: r.Deny, Overrides: len(r.Overrides),
			Capacity: r.Capacity, Ceiling: r.Ceiling, SoftFraction: r.Soft,
		}
		if r.InFlight {
			// A limit on requests in flight, not on a window.
			rr.Algorithm, rr.Window, rr.WindowSeconds = "in-flight", "", 0
			if mode == policy.Eventual {
				mode = policy.Strict // fleet-wide: every acquire is decided in the store
			}
			rr.Mode = mode.String()
		} else if r.Algorithm == policy.SlidingWindow || r.Algorithm == policy.WeightedWindow {
			rr.Precision = rulegeo.Buckets(r)
		}
		if note := storeNote(r, mode); note != "" {
			rr.StoreNote = note
		}
		fr.Rules = append(fr.Rules, rr)
	}
	return fr
}

// storeNote says why the store holds no window count of r's keys that
// inspect could read; "" if it does.
func storeNote(r policy.Rule, mode policy.Mode) string {
	switch {
	case mode == policy.Local:
		return "a local rule: each instance counts on its own, the store holds nothing"
	case r.Ceiling != 0:
		return "an elastic rule: its keys are counted on a meter of its capacity rule"
	case r.Algorithm != policy.SlidingWindow && r.Algorithm != policy.WeightedWindow && r.Algorithm != policy.FixedWindow:
		return "inspect reads the counts of the window algorithms (sliding, weighted, fixed), not " + r.Algorithm.String()
	}
	return ""
}

// resolveKey finds the rule and the key args name: KEY=VALUE... (a
// descriptor of an envoy file, in domain or the first file that matches
// it) or RULE KEY (a rule of any file). A key without a limit is no
// error: msg says so and rule is zero. code is not exitOK for a usage
// error, with msg.
func resolveKey(cfgs []policy.Config, domain string, args []string) (rule policy.Rule, key, msg string, code int) {
	descriptor := true
	for _, a := range args {
		if k, _, ok := strings.Cut(a, "="); !ok || k == "" {
			descriptor = false
		}
	}
	switch {
	case descriptor:
		entries := make([]policy.Entry, len(args))
		for i, a := range args {
			k, v, _ := strings.Cut(a, "=")
			entries[i] = policy.Entry{Key: k, Value: v}
		}
		for _, cfg := range cfgs {
			if cfg.Format != policy.FormatEnvoy || (domain != "" && cfg.Domain != domain) {
				continue
			}
			if name, k, ok := cfg.Match(entries...); ok {
				r, _ := findRule(cfgs, name)
				return r, k, "", exitOK
			}
		}
		return policy.Rule{}, "", "no limit applies to descriptor " + strings.Join(args, ","), exitOK
	case len(args) == 2:
		r, ok := findRule(cfgs, args[0])
		if !ok {
			return policy.Rule{}, "", fmt.Sprintf("no rule named %q in the files", args[0]), exitError
		}
		return r, args[1], "", exitOK
	}
	return policy.Rule{}, "", "a key is KEY=VALUE... (an envoy file's descriptor) or RULE KEY", exitUsage
}

func findRule(cfgs []policy.Config, name string) (policy.Rule, bool) {
	for _, cfg := range cfgs {
		for _, r := range cfg.Rules {
			if r.Name == name {
				return r, true
			}
		}
	}
	return policy.Rule{}, false
}

// inspector reads the fleet's state from the store.
type inspector struct {
	rdb    redis.UniversalClient
	prefix string
}

// health PINGs the store and reads its clock and version.
func (in inspector) health(ctx context.Context) *storeReport {
	st := &storeReport{Prefix: in.prefix}
	for i := range pings {
		start := time.Now()
		if err := in.rdb.Ping(ctx).Err(); err != nil {
			st.Error = fmt.Sprintf("PING: %v", err)
			return st
		}
		ms := float64(time.Since(start).Microseconds()) / 1000
		if i == 0 || ms < st.PingMinMs {
			st.PingMinMs = ms
		}
		st.PingMaxMs = max(st.PingMaxMs, ms)
	}
	t, err := in.rdb.Time(ctx).Result()
	if err != nil {
		st.Error = fmt.Sprintf("TIME: %v", err)
		return st
	}
	st.Time = t.UTC()
	if info, err := in.rdb.Info(ctx, "server").Result(); err == nil {
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
				st.Version = strings.TrimSpace(v)
			}
		}
	}
	st.OK = true
	return st
}

// instances reads the registry: the instances whose heartbeat has not
// expired at now (the store's time, ns), soonest to expire first.
func (in inspector) instances(ctx context.Context, now int64) ([]instanceInfo, error) {
	name := in.prefix + ":instances"
	zs, err := in.rdb.ZRangeWithScores(ctx, name, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("reading the registry %s: %w", name, err)
	}
	out := []instanceInfo{}
	nowMs := float64(now) / float64(time.Millisecond)
	for _, z := range zs {
		if z.Score <= nowMs {
			continue // expired: the next heartbeat of any instance removes it
		}
		id, _ := z.Member.(string)
		out = append(out, instanceInfo{ID: id, ExpiresInSeconds: (z.Score - nowMs) / 1000})
	}
	return out, nil
}

// key reads key's buckets of rule from the store and estimates its window
// at now (the store's time, ns), as the fleet's instances would.
func (in inspector) key(ctx context.Context, r policy.Rule, key string, now int64) (*keyReport, error) {
	kr := &keyReport{Rule: r.Name, Key: key, Limit: r.Limit, Buckets: []bucket{}}
	for _, o := range r.Overrides {
		if slices.Contains(o.Keys, key) {
			r, _ = r.Tier(o.Tier)
			kr.Rule, kr.Limit = r.Name, r.Limit
			if o.Unlimited {
				kr.Note = "override " + o.Tier + ": unlimited, nothing is counted"
				return kr, nil
			}
		}
	}
	if r.InFlight {
		return in.inFlight(ctx, r, kr, now)
	}
	mode := r.Mode
	if mode == policy.ModeDefault {
		mode = policy.Eventual // with a store
	}
	if note := storeNote(r, mode); note != "" {
		kr.Note = note
		return kr, nil
	}
	geo := engine.WindowGeometry(r) // as the limiter builds it
	kr.RedisKey = keyname.Window(in.prefix, r.Name, key, geo)
	h, err := in.rdb.HGetAll(ctx, kr.RedisKey).Result()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", kr.RedisKey, err)
	}
	counts := bucketCounts(h)
	k := geo.Index(now)
	count := func(j int64) int64 { return counts[j] }
	for j := k - int64(geo.Span()) + 1; j <= k; j++ {
		if c := counts[j]; c != 0 {
			kr.Buckets = append(kr.Buckets, bucket{Index: j, Count: c})
		}
	}
	e := geo.Parts(now, count)
	kr.Count, kr.Weighted = e.Whole, e.Weighted
	kr.Remaining = max(e.Room(r.Limit), 0)
	kr.ResetAfterSeconds = geo.ResetAt(now, count).Seconds()
	return kr, nil
}

// inFlight fills kr with the slots of an in-flight rule's key the store
// holds at now (ns): its leases not yet expired, as the acquire script
// counts them. Count is the slots held across the fleet; nothing resets.
func (in inspector) inFlight(ctx context.Context, r policy.Rule, kr *keyReport, now int64) (*keyReport, error) {
	if r.Mode == policy.Local {
		kr.Note = "a local in-flight rule: each instance counts its own slots, the store holds nothing"
		return kr, nil
	}
	kr.RedisKey = keyname.InFlight(in.prefix, r.Name, kr.Key)
	n, err := in.rdb.ZCount(ctx, kr.RedisKey, "("+strconv.FormatInt(now/int64(time.Millisecond), 10), "+inf").Result()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", kr.RedisKey, err)
	}
	kr.InFlight, kr.Count = true, n
	kr.Remaining = max(r.Limit-n, 0)
	return kr, nil
}

// bucketCounts sums a key's hash by bucket: field "<j>" is bucket j's
// fleet count and "v<j>" the part of it restored after the store lost its
// data; the other fields ("i:<instance>", "r<seq>:<instance>") are the
// sync's bookkeeping.
func bucketCounts(h map[string]string) map[int64]int64 {
	out := make(map[int64]int64, len(h))
	for f, v := range h {
		f = strings.TrimPrefix(f, "v")
		j, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		out[j] += n
	}
	return out
}

// redactURL drops a password from a Redis URL.
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	cred, host, ok := strings.Cut(rest, "@")
	if !ok {
		return u
	}
	if user, _, hasPass := strings.Cut(cred, ":"); hasPass {
		return scheme + "://" + user + ":xxxxx@" + host
	}
	return u
}

// printReport prints rep as text.
func printReport(w io.Writer, rep report) {
	for _, f := range rep.Files {
		fmt.Fprintf(w, "%s: %s configuration", f.Path, f.Format)
		if f.Domain != "" {
			fmt.Fprintf(w, ", domain %q", f.Domain)
		}
		if len(f.Rules) == 1 {
			fmt.Fprintln(w, ", 1 rule")
		} else {
			fmt.Fprintf(w, ", %d rules\n", len(f.Rules))
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, r := range f.Rules {
			limit := fmt.Sprintf("%d per %v", r.Limit, r.Window)
			switch {
			case r.Algorithm == "in-flight":
				limit = fmt.Sprintf("%d in flight", r.Limit)
			case r.Deny:
				limit = "deny all"
			case r.Limit == 0:
				limit = "unlimited"
			}
			var extra []string
			if r.Precision > 0 {
				extra = append(extra, fmt.Sprintf("precision %d", r.Precision))
			}
			if r.Burst > 0 {
				extra = append(extra, fmt.Sprintf("burst %d", r.Burst))
			}
			if r.Shadow {
				extra = append(extra, "shadow")
			}
			if r.Overrides > 0 {
				extra = append(extra, fmt.Sprintf("%d overrides", r.Overrides))
			}
			if r.Capacity != "" {
				extra = append(extra, fmt.Sprintf("elastic to %d on %s", r.Ceiling, r.Capacity))
			}
			line := fmt.Sprintf("  %s\t%s\t%s\t%s", r.Name, r.Algorithm, r.Mode, limit)
			if len(extra) > 0 {
				line += "\t" + strings.Join(extra, ", ")
			}
			fmt.Fprintln(tw, line)
		}
		_ = tw.Flush()
	}
	if st := rep.Store; st != nil {
		fmt.Fprintf(w, "store %s, prefix %q: ", st.Redis, st.Prefix)
		if st.OK {
			fmt.Fprintf(w, "ok, PING %.3f-%.3f ms", st.PingMinMs, st.PingMaxMs)
			if st.Version != "" {
				fmt.Fprintf(w, ", Redis %s", st.Version)
			}
			fmt.Fprintf(w, ", time %s\n", st.Time.Format(time.RFC3339Nano))
		} else {
			fmt.Fprintln(w, "unavailable")
		}
		if st.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", st.Error)
		}
		if st.OK {
			fmt.Fprintf(w, "instances: %d live\n", len(rep.Instances))
			for _, i := range rep.Instances {
				fmt.Fprintf(w, "  %s  expires in %.1fs\n", i.ID, i.ExpiresInSeconds)
			}
		}
	}
	if k := rep.Key; k != nil {
		if k.Note != "" {
			fmt.Fprintf(w, "key %q: %s\n", k.Key, k.Note)
			return
		}
		if k.InFlight {
			fmt.Fprintf(w, "key %q of rule %s: %d in flight across the fleet of %d, remaining %d\n  %s\n", k.Key, k.Rule, k.Count, k.Limit, k.Remaining, k.RedisKey)
			return
		}
		fmt.Fprintf(w, "key %q of rule %s: fleet count %d", k.Key, k.Rule, k.Count)
		if k.Weighted != 0 {
			fmt.Fprintf(w, " + %.2f (the oldest bucket, weighted)", k.Weighted)
		}
		fmt.Fprintf(w, " of %d, remaining %d, resets in %v\n", k.Limit, k.Remaining, time.Duration(k.ResetAfterSeconds*float64(time.Second)).Round(time.Millisecond))
		fmt.Fprintf(w, "  %s:", k.RedisKey)
		if len(k.Buckets) == 0 {
			fmt.Fprint(w, " no count in the window")
		}
		for _, b := range k.Buckets {
			fmt.Fprintf(w, " [%d]=%d", b.Index, b.Count)
		}
		fmt.Fprintln(w)
	}
}
