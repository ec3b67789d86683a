package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/fleet"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/report"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/sim"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/store"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/traffic"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// redisLog takes go-redis's own log lines, which it writes on stderr by
// default: dial failures (an -outage, a store going away) would flood the
// output. It counts them, writes them to -out's redis.log, and the report
// says so.
var redisLog = &storeLog{}

// installRedisLog routes go-redis's logger, once per process.
var installRedisLog = sync.OnceFunc(func() { redis.SetLogger(redisLog) })

// run is main with its streams, returning the exit code: 0 done, 1 the run
// failed, 2 bad flags.
func run(args []string, stdout, stderr io.Writer) int {
	installRedisLog()
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\nRun with -h for the flags.\n", err)
		return 2
	}
	if o.Child {
		if err := fleet.Child(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(stderr, "loadtest child: %v\n", err)
			return 1
		}
		return 0
	}
	if o.PNG {
		report.Ext = ".png"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &report.Run{
		Command: "go run ./cmd/loadtest " + strings.Join(args, " "),
		Go:      runtime.Version(),
		CPUs:    runtime.NumCPU(),
		Started: time.Now(),
	}
	r.Command = strings.TrimSpace(r.Command)
	if o.Sim {
		err = runSim(o, r, stderr)
	} else {
		logPath := ""
		if o.Out != "" {
			logPath = filepath.Join(o.Out, "redis.log")
		}
		redisLog.reset(logPath)
		err = runFleet(ctx, o, r, stderr)
		redisLog.close()
	}
	r.Took = report.Dur(time.Since(r.Started).Round(time.Millisecond))
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		if len(r.Scenarios) == 0 && r.Sim == nil {
			return 1
		}
	}
	if o.JSON {
		if werr := report.WriteJSON(stdout, r, false); werr != nil {
			fmt.Fprintf(stderr, "loadtest: %v\n", werr)
			return 1
		}
	} else {
		report.Text(stdout, report.Style{Markdown: o.Markdown, Wide: o.Wide}, r)
		printCompose(stdout, o.Composed)
	}
	if o.Out != "" {
		if werr := writeOut(o, r); werr != nil {
			fmt.Fprintf(stderr, "loadtest: -out: %v\n", werr)
			return 1
		}
	}
	if err != nil {
		return 1
	}
	return 0
}

func runSim(o *options, r *report.Run, stderr io.Writer) error {
	cfg := sim.Config{
		Rule:      o.Rule,
		RuleText:  o.RuleText,
		Duration:  o.Duration,
		Rate:      o.Rate,
		Keys:      o.Keys,
		Zipf:      o.Zipf,
		Cost:      o.Cost,
		Seed:      o.Seed,
		Precision: o.Precision,
		Profiles:  o.Profiles,
		Explicit:  o.set["profile"],
		Out:       o.Out,
	}
	if !o.Quiet {
		fmt.Fprintln(stderr, "loadtest: simulating (virtual clock)…")
	}
	s, err := sim.Run(cfg)
	r.Sim = s
	r.Store = "none (simulation)"
	return err
}

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// embeddedTimeout is the default -timeout on the embedded stand-in.
const embeddedTimeout = 250 * time.Millisecond

func runFleet(ctx context.Context, o *options, r *report.Run, stderr io.Writer) error {
	if o.Metrics != "" {
		ms, err := startMetrics(o.Metrics)
		if err != nil {
			return err
		}
		defer func() { _ = ms.Close() }()
		o.meter = ms.provider
		fmt.Fprintf(stderr, "loadtest: sluice metrics on http://%s/metrics (one series per instance: label service_instance_id)\n", ms.Addr())
	}
	var target store.Target
	var emb *store.Embedded
	switch {
	case o.local:
		loc, t, err := store.StartLocal(ctx)
		if err != nil {
			return fmt.Errorf("%w (-embedded runs on the in-process stand-in instead)", err)
		}
		defer loc.Stop()
		target = t
		fmt.Fprintf(stderr, "loadtest: no -redis given: started a throwaway redis-server on %s (stopped at the end; -embedded runs on the in-process stand-in instead).\n", target.Addrs[0])
		r.Notes = append(r.Notes, "store: a throwaway redis-server on loopback, started for this run (no -redis given)")
	case o.Redis == "":
		var err error
		emb, target, err = store.StartEmbedded()
		if err != nil {
			return err
		}
		defer emb.Close()
		why := "no redis-server in PATH: install one, or pass -redis, to run against a real Redis"
		if o.Embedded || o.Outage != 0 {
			why = "-embedded or -outage"
		}
		fmt.Fprintf(stderr, "loadtest: no -redis given: started an embedded Redis stand-in (miniredis) on %s (%s).\n"+
			"          It is a stand-in, not a real Redis: accuracy figures hold, Redis latency and memory do not.\n", target.Addrs[0], why)
		r.Notes = append(r.Notes, "store: embedded miniredis, a stand-in for Redis (single-threaded Go, Lua via gopher-lua): accuracy figures are real, sync-cycle latency and Redis costs are not those of a real Redis; run with -redis for those")
		if !o.set["timeout"] {
			// parseFlags chose embeddedTimeout (see fillDefaults).
			r.Notes = append(r.Notes, fmt.Sprintf("-timeout defaults to %v on the embedded stand-in (the library's default is %v: pass -timeout to use it)", embeddedTimeout, sluice.DefaultTimeout))
		}
	default:
		var err error
		if target, err = store.Parse(o.Redis); err != nil {
			return err
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		target, err = target.Detect(dctx)
		cancel()
		if err != nil {
			return err
		}
	}
	if o.Latency > 0 {
		slow, via, err := startSlowStore(target, o.Latency)
		if err != nil {
			return err
		}
		defer slow.Close()
		r.Notes = append(r.Notes, fmt.Sprintf("store: every reply delayed by %v through a TCP proxy on %s (-latency)", o.Latency, via.Addrs[0]))
		target = via
	}
	r.Store = target.String()
	r.LocalBytesPerKey = localBytesPerKey(o.Rule, 100_000)
	runID := newRunID()
	type point struct {
		opts    options
		profile string
		sweep   string
	}
	var points []point
	if o.Sweep != nil {
		r.Sweep = o.Sweep.String()
		for i := range o.Sweep.Values {
			p := *o
			o.Sweep.apply(&p, i)
			for _, prof := range o.Profiles {
				points = append(points, point{p, prof, o.Sweep.Param + "=" + o.Sweep.Values[i]})
			}
		}
	} else {
		for _, prof := range o.Profiles {
			points = append(points, point{*o, prof, ""})
		}
	}
	var total time.Duration
	for _, p := range points {
		total += p.opts.durationFor(p.profile)
	}
	prog := newProgress(stderr, o.Quiet, isTerminal(stderr), total)
	for i, p := range points {
		if ctx.Err() != nil {
			prog.abort()
			return ctx.Err()
		}
		name := strings.TrimSpace(p.profile + " " + p.sweep)
		prog.begin(i, len(points), name, p.opts.durationFor(p.profile))
		var hooks []fleet.Hooks
		if p.opts.Outage > 0 && emb != nil {
			at := p.opts.durationFor(p.profile) * 2 / 5
			d := p.opts.Outage
			hooks = append(hooks, fleet.Hooks{At: at, Do: func() {
				emb.Stop()
				time.Sleep(d)
				_ = emb.Restart()
			}})
		}
		if p.profile == traffic.StoreLoss && !o.local && emb == nil {
			// FLUSHALL empties the whole store: only one that holds
			// nothing but load-test keys.
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			k, err := target.Foreign(fctx, "lt:", 1_000_000)
			cancel()
			if err == nil && k != "" {
				err = fmt.Errorf("it holds %q, which is not the load test's", k)
			}
			if err != nil {
				prog.abort()
				return fmt.Errorf("profile %s runs FLUSHALL on the store, so on -redis it needs a Redis of its own: %v", p.profile, err)
			}
		}
		start, logged := time.Now(), redisLog.mark()
		if slices.Contains(composeProfiles, p.profile) {
			cr, err := runCompose(ctx, &p.opts, p.profile, target, fmt.Sprintf("lt:%s:%d", runID, i))
			cleanupRedis(target, fmt.Sprintf("lt:%s:%d", runID, i))
			if err != nil {
				prog.abort()
				return fmt.Errorf("profile %s: %w", p.profile, err)
			}
			o.Composed = append(o.Composed, cr)
			for _, l := range cr.Lines {
				r.Notes = append(r.Notes, cr.Profile+": "+l)
			}
			prog.end(0, time.Since(start))
			continue
		}
		sc, err := runScenario(ctx, &p.opts, p.profile, p.sweep, target, fmt.Sprintf("lt:%s:%d", runID, i), runID, func(f float64) { prog.at(i, f) }, hooks)
		if sc != nil && err == nil {
			err = runPeers(ctx, &p.opts, sc)
		}
		if sc != nil {
			if n := redisLog.note(logged); n != "" {
				if o.Procs {
					n += " (in this process; -procs children drop theirs)"
				}
				sc.Notes = append(sc.Notes, n)
			}
			r.Scenarios = append(r.Scenarios, *sc)
		}
		if err != nil {
			prog.abort()
			return fmt.Errorf("scenario %s %s: %w", p.profile, p.sweep, err)
		}
		var checks int64
		if sc != nil {
			checks = sc.Cost.Checks
		}
		prog.end(checks, time.Since(start))
	}
	prog.finish()
	return nil
}

// writeOut writes report.json and the plots.
func writeOut(o *options, r *report.Run) error {
	f, err := os.Create(filepath.Join(o.Out, "report.json"))
	if err != nil {
		return err
	}
	if err := report.WriteJSON(f, r, true); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if r.Sim != nil {
		return nil // the simulation wrote its plots
	}
	if o.Sweep != nil {
		xs := make([]float64, len(o.Sweep.Values))
		for i := range xs {
			xs[i] = o.Sweep.numeric(i)
		}
		if err := report.SweepPlots(o.Out, o.Sweep.Param, xs, o.Profiles, r.Scenarios); err != nil {
			return err
		}
	}
	if o.Sweep != nil {
		return nil // the per-scenario window plots are in report.json
	}
	for _, s := range r.Scenarios {
		if err := report.WindowPlot(filepath.Join(o.Out, "window-"+s.Name+report.Ext), &s); err != nil {
			return err
		}
	}
	return nil
}
