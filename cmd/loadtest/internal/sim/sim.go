// Package sim is the load test's simulation mode: a virtual clock, the
// counting algorithms of package window run centrally on generated traffic,
// deterministic under a seed and much faster than real time (an hour of a
// 100/min rule takes well under a second).
//
// It models the algorithm, not the fleet: no instances, no syncer, no Redis.
// Each algorithm decides the whole merged stream as one central limiter would,
// so what it measures is the algorithm's own error against the exact sliding
// log — the part of a fleet's error that no sync interval or error budget can
// remove. The fleet's own error is measured by the real load test.
package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"time"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/oracle"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/record"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/report"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/traffic"
	"github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// Config is a simulation run.
type Config struct {
	Rule      policy.Rule
	RuleText  string
	Duration  time.Duration
	Rate      float64 // offered checks/s, all keys
	Keys      int     // 0: profile default
	Zipf      float64
	Cost      int
	Seed      uint64
	Precision int // the user's B, added to the comparison
	Profiles  []string
	// Explicit: profiles were chosen with -profile (otherwise the default
	// comparison: the seed article's counting plots, then Poisson and the
	// boundary attack).
	Explicit bool
	Out      string // plots go here if not empty
}

// Algo is one counting algorithm under comparison.
type Algo struct {
	Name string
	Geo  window.Sliding
}

// Algorithms returns the algorithms compared for window w: the fixed window
// and the sliding and weighted sliding windows with B = 1, 4, 5, 10, 60 (and
// extra), keeping those whose sub-windows are whole microseconds.
func Algorithms(w time.Duration, extra int) []Algo {
	as := []Algo{{Name: "fixed window", Geo: window.NewFixed(w)}}
	bs := []int{1, 4, 5, 10, 60}
	if extra > 0 && !slices.Contains(bs, extra) {
		bs = append(bs, extra)
		slices.Sort(bs)
	}
	for _, b := range bs {
		r := policy.Rule{Name: "x", Limit: 1, Window: w, Precision: b}
		if r.Validate() != nil {
			continue
		}
		as = append(as, Algo{Name: algoName("sliding", b, w), Geo: window.NewSliding(w, b)})
		as = append(as, Algo{Name: algoName("weighted", b, w), Geo: window.NewWeighted(w, b)})
	}
	return as
}

func algoName(kind string, b int, w time.Duration) string {
	switch {
	case b == 1 && kind == "weighted":
		return "weighted B=1 (current + weighted previous)"
	case b == 4:
		return fmt.Sprintf("%s B=4 (five %v counters)", kind, w/4)
	}
	return fmt.Sprintf("%s B=%d", kind, b)
}

// Run runs the simulation and writes its plots to cfg.Out.
func Run(cfg Config) (*report.Sim, error) {
	w := cfg.Rule.Window
	l := cfg.Rule.Limit
	s := &report.Sim{Rule: cfg.RuleText, Duration: cfg.Duration, Seed: cfg.Seed}
	algos := Algorithms(w, cfg.Precision)
	if cfg.Rule.Algorithm == policy.FixedWindow {
		algos = Algorithms(w, 0)
	}
	if !cfg.Explicit {
		if err := counting(cfg, s, algos); err != nil {
			return s, err
		}
	}
	profiles := cfg.Profiles
	if !cfg.Explicit {
		profiles = []string{traffic.Steady, traffic.Boundary}
	}
	var boundaryRuns []run
	var sweepRows [][]float64
	for _, prof := range profiles {
		p := params(cfg, prof)
		if err := p.Validate(); err != nil {
			return s, err
		}
		checks, truncated := p.Merged(50_000_000)
		desc := fmt.Sprintf("%s: %s; %d checks", prof, describe(&p), len(checks))
		if truncated {
			desc += " (truncated at 50M)"
		}
		s.Traffic = append(s.Traffic, desc)
		exact := replay(checks, nil, l, w)
		ea := oracle.Analyze(exact, oracle.Params{Geometry: window.NewSliding(w, 1), Limit: l})
		s.Limiting = append(s.Limiting, report.SimRow{Profile: prof, Algorithm: "exact sliding log", Accuracy: ea.Summary})
		for _, a := range algos {
			recs := replay(checks, &a.Geo, l, w)
			an := oracle.Analyze(recs, oracle.Params{Geometry: a.Geo, Limit: l})
			s.Limiting = append(s.Limiting, report.SimRow{Profile: prof, Algorithm: a.Name, Accuracy: an.Summary})
			if prof == traffic.Boundary {
				boundaryRuns = append(boundaryRuns, run{a, an})
			}
		}
		if !cfg.Explicit && cfg.Out != "" {
			// Over-admission against B, for the plot.
			var row []float64
			for _, b := range sweepBs(w) {
				recs := replay(checks, ptr(window.NewSliding(w, b)), l, w)
				an := oracle.Analyze(recs, oracle.Params{Geometry: window.NewSliding(w, b), Limit: l})
				row = append(row, an.Summary.OverMax, an.Summary.OverP99, an.Summary.WrongRate)
			}
			recs := replay(checks, ptr(window.NewFixed(w)), l, w)
			an := oracle.Analyze(recs, oracle.Params{Geometry: window.NewFixed(w), Limit: l})
			row = append(row, an.Summary.OverMax, an.Summary.OverP99, an.Summary.WrongRate)
			sweepRows = append(sweepRows, row)
		}
	}
	if cfg.Out != "" && len(boundaryRuns) > 0 {
		if err := boundaryPlot(cfg, boundaryRuns, filepath.Join(cfg.Out, "sim-boundary"+report.Ext)); err != nil {
			return s, err
		}
	}
	if cfg.Out != "" && len(sweepRows) == 2 {
		if err := sweepPlot(cfg, profiles, sweepRows, filepath.Join(cfg.Out, "sim-error-vs-b"+report.Ext)); err != nil {
			return s, err
		}
	}
	return s, nil
}

func ptr[T any](v T) *T { return &v }

type run struct {
	a  Algo
	an *oracle.Analysis
}

// sweepBs are the B of the error-against-B plot that split w.
func sweepBs(w time.Duration) []int {
	var bs []int
	for _, b := range []int{1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 30, 40, 60} {
		if (policy.Rule{Name: "x", Limit: 1, Window: w, Precision: b}).Validate() == nil {
			bs = append(bs, b)
		}
	}
	return bs
}

// params returns the traffic of a profile in simulation.
func params(cfg Config, prof string) traffic.Params {
	w := cfg.Rule.Window
	keys := cfg.Keys
	if keys == 0 {
		switch prof {
		case traffic.Boundary:
			keys = 1 // every attacked key sees the same pattern
		case traffic.Zipf:
			keys = 10000
		case traffic.Churn:
			keys = 20
		default:
			keys = 100
		}
	}
	p := traffic.Params{
		Profile:   prof,
		Rate:      cfg.Rate,
		Duration:  cfg.Duration,
		Window:    w,
		Sub:       w / 60, // shape the attacks for the finest B compared
		Limit:     cfg.Rule.Limit,
		Keys:      keys,
		Zipf:      cfg.Zipf,
		MaxCost:   cfg.Cost,
		Instances: 4,
		Workers:   2,
		Sync:      w / 100,
		Seed:      cfg.Seed,
	}
	if w%60 != 0 {
		p.Sub = w / 10
	}
	if prof == traffic.Boundary {
		// An attacker with a precise clock: each burst takes 1/6000 of W.
		p.AttackWidth = max(w/6000, time.Microsecond)
	}
	return p
}

func describe(p *traffic.Params) string {
	switch p.Profile {
	case traffic.Boundary:
		return fmt.Sprintf("%d keys, each attacked every 2 windows with L in the last %v of a window, L in the first %v of the next, then pressure", p.Keys, p.AttackWidth, p.AttackWidth)
	}
	return fmt.Sprintf("%s, %.0f checks/min over %d keys (Zipf %.1f)", traffic.Describe(p.Profile), p.Rate*60, p.Keys, p.Zipf)
}

// replay decides checks with one central limiter per key: geo's counter, or
// the exact log if geo is nil.
func replay(checks []traffic.Check, geo *window.Sliding, l int64, w time.Duration) []record.Record {
	type limiter interface{ Allow(t, n int64) bool }
	lims := map[uint32]limiter{}
	recs := make([]record.Record, len(checks))
	for i, c := range checks {
		lim := lims[c.Key]
		if lim == nil {
			if geo == nil {
				lim = reference.NewLog(w, l)
			} else {
				lim = reference.NewCounter(*geo, l)
			}
			lims[c.Key] = lim
		}
		r := record.Record{T: c.At, Key: c.Key, Cost: c.Cost}
		if lim.Allow(c.At, int64(c.Cost)) {
			r.Flags = record.Allowed
		}
		recs[i] = r
	}
	return recs
}

// counting reproduces the seed article's comparison: one key, random
// traffic around L per window, no limiting; each algorithm's estimate of the
// window's count against the exact sliding count.
func counting(cfg Config, s *report.Sim, algos []Algo) error {
	w := int64(cfg.Rule.Window)
	l := float64(cfg.Rule.Limit)
	span := min(int64(cfg.Duration), 30*w)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xc0ffee))
	// The rate does a bounded random walk between 0.3·L and 1.7·L per
	// window, changing every W/6.
	var times []int64
	level := 1.0
	for t := int64(0); t < span; {
		step := w / 6
		level = min(max(level+rng.NormFloat64()*0.25, 0.3), 1.7)
		rate := level * l / float64(w) // per ns
		end := t + step
		for {
			t += int64(rng.ExpFloat64() / rate)
			if t >= end {
				break
			}
			times = append(times, t)
		}
		t = end
	}
	s.CountTraffic = fmt.Sprintf("one key, Poisson arrivals whose rate wanders between 0.3·L and 1.7·L per window, %d arrivals over %v", len(times), time.Duration(span))
	grid := w / 240
	var ts []float64
	var exact []float64
	ests := make([][]float64, len(algos))
	counters := make([]*reference.Counter, len(algos))
	for i, a := range algos {
		counters[i] = reference.NewCounter(a.Geo, math.MaxInt32)
	}
	head, tail := 0, 0
	for t := w; t <= span; t += grid {
		for tail < len(times) && times[tail] <= t {
			for _, c := range counters {
				c.Add(times[tail], 1)
			}
			tail++
		}
		for head < tail && times[head] <= t-w {
			head++
		}
		ts = append(ts, float64(t)/1e9)
		exact = append(exact, float64(tail-head))
		for i, c := range counters {
			ests[i] = append(ests[i], c.Estimate(t))
		}
	}
	for i, a := range algos {
		row := report.CountRow{Algorithm: a.Name}
		for j := range ts {
			d := (ests[i][j] - exact[j]) / l
			row.MeanAbs += math.Abs(d)
			row.MaxOver = max(row.MaxOver, d)
			row.MaxUnder = min(row.MaxUnder, d)
		}
		row.MeanAbs /= float64(len(ts))
		s.Counting = append(s.Counting, row)
	}
	if cfg.Out == "" {
		return nil
	}
	// Plot the first 10 windows, one chart per algorithm, as in the article.
	n := min(len(ts), 10*240)
	for i, a := range algos {
		name := map[int]string{1: "b1", 4: "b4", 5: "b5", 10: "b10", 60: "b60"}[a.Geo.Buckets()]
		if a.Geo.Span() == 1 { // fixed
			name = "fixed"
		}
		if name == "" {
			name = fmt.Sprintf("b%d", a.Geo.Buckets())
		}
		if a.Geo.Weighted() {
			name = "weighted-" + name
		}
		c := report.Chart{
			Title:  fmt.Sprintf("%s vs the perfect sliding window (%s, random traffic)", a.Name, cfg.RuleText),
			XLabel: "time (s)",
			YLabel: "requests counted in the last W",
			Lines: []report.Line{
				{Name: "perfect sliding window", X: ts[:n], Y: exact[:n], Color: report.Palette(7), Width: 2},
				{Name: a.Name, X: ts[:n], Y: ests[i][:n], Color: report.Palette(1), Dashes: report.Dotted},
			},
		}
		if err := c.Save(filepath.Join(cfg.Out, "sim-count-"+name+report.Ext)); err != nil {
			return err
		}
	}
	return nil
}
