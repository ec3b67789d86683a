// Package report formats the load test's results: text and Markdown tables,
// JSON, and plots (gonum.org/v1/plot).
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/oracle"
)

// Settings are the knobs of one scenario.
type Settings struct {
	Profile      string        `json:"profile"`
	Rule         string        `json:"rule"` // "100/1s sliding B=10"
	Limit        int64         `json:"limit"`
	Window       time.Duration `json:"window"`
	Algorithm    string        `json:"algorithm"`
	Precision    int           `json:"precision"`
	SyncInterval time.Duration `json:"sync_interval"`
	ErrorBudget  float64       `json:"error_budget"`
	Instances    int           `json:"instances"`
	Workers      int           `json:"workers"`
	Procs        bool          `json:"procs"`
	Keys         int           `json:"keys"`
	Zipf         float64       `json:"zipf"`
	Rate         float64       `json:"rate"` // offered checks/s asked for; 0 = as fast as possible
	Duration     time.Duration `json:"duration"`
	Seed         uint64        `json:"seed"`
	Sweep        string        `json:"sweep,omitempty"` // "sync=10ms" for a sweep point
}

// Cost is what a scenario cost in throughput, latency and store traffic.
type Cost struct {
	Checks        int64     `json:"checks"`
	ChecksPerSec  float64   `json:"checks_per_sec"`
	PerInstance   []float64 `json:"checks_per_sec_per_instance"`
	Errors        int64     `json:"errors"`
	LatencyP50    Dur       `json:"latency_p50"`
	LatencyP99    Dur       `json:"latency_p99"`
	LatencyP999   Dur       `json:"latency_p999"`
	LatencyMax    Dur       `json:"latency_max"`
	LatencySample uint64    `json:"latency_samples"`
	// TimedOut is the share of sampled checks that waited the whole
	// Options.Timeout for Redis (then decided by the failure mode).
	TimedOut float64 `json:"timed_out_share"`
	// Per instance, per second of serving, averaged over instances.
	CommandsPerSec     float64 `json:"redis_commands_per_sec_per_instance"`
	RoundTripsPerSec   float64 `json:"redis_round_trips_per_sec_per_instance"`
	KeySyncsPerSec     float64 `json:"key_syncs_per_sec_per_instance"`
	UrgentPerSec       float64 `json:"urgent_syncs_per_sec_per_instance"`
	ReservationsPerSec float64 `json:"reservations_per_sec_per_instance"`
	// UrgentPerWindow: urgent syncs per window, fleet-wide (each one round
	// trip carrying the reservations of every key waiting).
	UrgentPerWindow float64 `json:"urgent_syncs_per_window"`
	Failures        int64   `json:"redis_failures"`
	CycleP50        Dur     `json:"sync_cycle_p50"`
	CycleMax        Dur     `json:"sync_cycle_max"`
	CycleKeys       int64   `json:"sync_cycle_keys_max"`
	NHatMin         int64   `json:"nhat_min"`
	NHatMax         int64   `json:"nhat_max"`
	MaxLag          Dur     `json:"schedule_lag_max"`
	MaxSkew         Dur     `json:"decision_time_correction_max"`
	Ambiguous       int64   `json:"ambiguous_decision_times,omitempty"`
	// ClockSpread is how far apart the instances' store clocks were: the
	// largest minus the smallest offset seen across the fleet (the wall
	// clock is shared, so this is measurement error of the offsets).
	ClockSpread      Dur     `json:"store_clock_spread"`
	RedisBytesPerKey float64 `json:"redis_bytes_per_key,omitempty"`
	Truncated        bool    `json:"truncated,omitempty"`
	Degraded         bool    `json:"degraded,omitempty"`
	Wall             Dur     `json:"wall"`
}

// Dur is a duration that marshals as a string ("1.2ms").
type Dur time.Duration

// MarshalJSON writes the duration as text.
func (d Dur) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration written by MarshalJSON.
func (d *Dur) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Dur(v)
	return err
}

// Scenario is one run's result.
type Scenario struct {
	Name     string         `json:"name"`
	Settings Settings       `json:"settings"`
	Accuracy oracle.Summary `json:"accuracy"`
	Cost     Cost           `json:"cost"`
	// Series is the admitted-per-window series of the plotted key.
	Series    *oracle.Series `json:"series,omitempty"`
	SeriesKey int64          `json:"series_key"`
	Notes     []string       `json:"notes,omitempty"`
}

// Run is a whole invocation's report.
type Run struct {
	Command string    `json:"command"`
	Store   string    `json:"store"`
	Go      string    `json:"go"`
	CPUs    int       `json:"cpus"`
	Started time.Time `json:"started"`
	Took    Dur       `json:"took"`
	// LocalBytesPerKey is the heap growth per tracked key of a limiter.
	LocalBytesPerKey float64    `json:"local_bytes_per_key"`
	Scenarios        []Scenario `json:"scenarios"`
	Sweep            string     `json:"sweep,omitempty"`
	Sim              *Sim       `json:"sim,omitempty"`
	Notes            []string   `json:"notes,omitempty"`
}

// WriteJSON writes r as indented JSON (series included only with series).
func WriteJSON(w io.Writer, r *Run, series bool) error {
	c := *r
	if !series {
		c.Scenarios = make([]Scenario, len(r.Scenarios))
		for i, s := range r.Scenarios {
			s.Series = nil
			c.Scenarios[i] = s
		}
	}
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(&c)
}

// pct formats a fraction as a percentage.
func pct(f float64) string {
	switch {
	case math.IsNaN(f):
		return "–"
	case f == 0:
		return "0"
	case math.Abs(f) < 0.0001:
		return fmt.Sprintf("%.4f%%", 100*f)
	case math.Abs(f) < 0.01:
		return fmt.Sprintf("%.3f%%", 100*f)
	}
	return fmt.Sprintf("%.2f%%", 100*f)
}

// util formats utilization and its minimum ("–" without hot keys).
func util(a *oracle.Summary) string {
	if a.HotKeys == 0 {
		return "–"
	}
	return pct(a.Utilization) + " (" + pct(a.UtilizationMin) + ")"
}

// rate formats a count per second.
func rate(f float64) string {
	switch {
	case f >= 1e6:
		return fmt.Sprintf("%.2fM", f/1e6)
	case f >= 1e4:
		return fmt.Sprintf("%.0fk", f/1e3)
	case f >= 1e3:
		return fmt.Sprintf("%.1fk", f/1e3)
	case f >= 10:
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%.2g", f)
}

func dur(d Dur) string {
	t := time.Duration(d)
	switch {
	case t == 0:
		return "0"
	case t < time.Microsecond:
		return fmt.Sprintf("%dns", t.Nanoseconds())
	case t < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(t)/1e3)
	case t < time.Second:
		return fmt.Sprintf("%.1fms", float64(t)/1e6)
	}
	return t.Round(10 * time.Millisecond).String()
}

// table writes rows as an aligned text table or a Markdown table.
func table(w io.Writer, md bool, head []string, rows [][]string) {
	if md {
		fmt.Fprintf(w, "| %s |\n", strings.Join(head, " | "))
		seps := make([]string, len(head))
		for i := range seps {
			seps[i] = "---:"
			if i == 0 {
				seps[i] = "---"
			}
		}
		fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
		for _, r := range rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\t\n", strings.Join(head, "\t"))
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t\n", strings.Join(r, "\t"))
	}
	tw.Flush()
}

// label names a scenario in the tables: its profile, or the sweep point.
func label(s *Scenario) string {
	if s.Settings.Sweep != "" {
		return s.Settings.Profile + " " + s.Settings.Sweep
	}
	return s.Name
}

// AccuracyTable writes the accuracy table.
func AccuracyTable(w io.Writer, md bool, ss []Scenario) {
	head := []string{"scenario", "checks", "limited keys", "over-adm fleet max/p99", "algorithm alone max/p99", "fleet excess max/p99", "fleet in own estimate (≤ ε)", "utilization (min)", "false denials", "wrong decisions", "fleet≠central"}
	var rows [][]string
	for i := range ss {
		s := &ss[i]
		a := &s.Accuracy
		eps := s.Settings.ErrorBudget
		bound := "✓"
		if a.EstimateOverMax > eps+1e-9 {
			bound = "✗ over ε"
		}
		rows = append(rows, []string{
			label(s),
			fmt.Sprint(a.Checks),
			fmt.Sprint(a.LimitedKeys),
			pct(a.OverMax) + " / " + pct(a.OverP99),
			pct(a.AlgoOverMax) + " / " + pct(a.AlgoOverP99),
			pct(a.ExcessMax) + " / " + pct(a.ExcessP99),
			pct(a.EstimateOverMax) + " " + bound,
			util(a),
			fmt.Sprintf("%d of %d keys", a.FalseDenialKeys, a.QuietKeys),
			pct(a.WrongRate),
			pct(a.DisagreeRate),
		})
	}
	table(w, md, head, rows)
}

// CostTable writes the throughput, latency and store-traffic table.
func CostTable(w io.Writer, md bool, ss []Scenario) {
	head := []string{"scenario", "checks/s", "per instance", "Allow p50", "p99", "p99.9", "Redis cmds/s/inst", "round trips/s/inst", "urgent syncs/s/inst", "urgent syncs/window (fleet)", "sync cycle p50 (max)", "N̂", "clock spread"}
	var rows [][]string
	for i := range ss {
		s := &ss[i]
		c := &s.Cost
		per := "–"
		if len(c.PerInstance) > 0 {
			lo, hi := c.PerInstance[0], c.PerInstance[0]
			for _, x := range c.PerInstance {
				lo, hi = min(lo, x), max(hi, x)
			}
			per = rate(lo) + "–" + rate(hi)
		}
		nh := fmt.Sprint(c.NHatMin)
		if c.NHatMax != c.NHatMin {
			nh = fmt.Sprintf("%d–%d", c.NHatMin, c.NHatMax)
		}
		rows = append(rows, []string{
			label(s),
			rate(c.ChecksPerSec),
			per,
			dur(c.LatencyP50), dur(c.LatencyP99), dur(c.LatencyP999),
			rate(c.CommandsPerSec), rate(c.RoundTripsPerSec), rate(c.UrgentPerSec),
			fmt.Sprintf("%.0f", c.UrgentPerWindow),
			dur(c.CycleP50) + " (" + dur(c.CycleMax) + ")",
			nh,
			dur(c.ClockSpread),
		})
	}
	table(w, md, head, rows)
}

// Text writes the whole report as text (md: Markdown tables).
func Text(w io.Writer, md bool, r *Run) {
	if r.Sim != nil {
		SimText(w, md, r.Sim)
	}
	if len(r.Scenarios) == 0 {
		return
	}
	s0 := r.Scenarios[0].Settings
	fmt.Fprintf(w, "\nFleet: %d instances%s, %d workers each; rule %s; sync %v; error budget ε = %s; store: %s\n",
		s0.Instances, map[bool]string{true: " (separate processes)", false: " (one process)"}[s0.Procs], s0.Workers, s0.Rule, s0.SyncInterval, pct(s0.ErrorBudget), r.Store)
	fmt.Fprintf(w, "\nAccuracy (over-admission: max over t of admitted in (t−W, t] ÷ L − 1, over keys offered > L; \"algorithm alone\" = the same algorithm run centrally on the same checks; \"fleet excess\" = fleet − algorithm alone, per key; \"own estimate\" = the fleet's admissions as the algorithm counts them, which the error budget bounds; wrong decisions against an exact central sliding log):\n\n")
	AccuracyTable(w, md, r.Scenarios)
	fmt.Fprintf(w, "\nCost (Allow latency sampled 1 in 64; Redis traffic from Limiter.Stats, per instance per second; N̂ = live instances seen; clock spread = how far apart the instances' store-clock offsets were):\n\n")
	CostTable(w, md, r.Scenarios)
	fmt.Fprintln(w)
	if r.LocalBytesPerKey > 0 {
		fmt.Fprintf(w, "Memory: %.0f bytes per tracked key in the local cache (heap growth over 100k keys of rule %s)", r.LocalBytesPerKey, s0.Rule)
		var rb []string
		for _, s := range r.Scenarios {
			if s.Cost.RedisBytesPerKey > 0 {
				rb = append(rb, fmt.Sprintf("%s %.0f", label(&s), s.Cost.RedisBytesPerKey))
			}
		}
		if len(rb) > 0 {
			fmt.Fprintf(w, "; in Redis (MEMORY USAGE, sampled keys), bytes per key: %s", strings.Join(rb, ", "))
		} else {
			fmt.Fprintf(w, "; in Redis: not measured (needs a real Redis: MEMORY USAGE)")
		}
		fmt.Fprintln(w, ".")
	}
	for _, s := range r.Scenarios {
		for _, n := range s.Notes {
			fmt.Fprintf(w, "note (%s): %s\n", label(&s), n)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// CountRow is one algorithm's counting error on the same random traffic (no
// limiting): how far its estimate strays from the exact sliding count.
type CountRow struct {
	Algorithm string `json:"algorithm"`
	// MeanAbs, MaxOver, MaxUnder: estimate − exact, as fractions of L.
	MeanAbs  float64 `json:"mean_abs"`
	MaxOver  float64 `json:"max_over"`
	MaxUnder float64 `json:"max_under"`
}

// SimRow is one algorithm limiting one profile in simulation.
type SimRow struct {
	Profile   string         `json:"profile"`
	Algorithm string         `json:"algorithm"`
	Accuracy  oracle.Summary `json:"accuracy"`
}

// Sim is the simulation's report.
type Sim struct {
	Rule     string        `json:"rule"`
	Duration time.Duration `json:"duration"`
	Seed     uint64        `json:"seed"`
	// CountRate is the mean offered rate of the counting comparison.
	CountTraffic string     `json:"count_traffic,omitempty"`
	Counting     []CountRow `json:"counting,omitempty"`
	Limiting     []SimRow   `json:"limiting"`
	Traffic      []string   `json:"traffic"`
}

// SimText writes the simulation's tables.
func SimText(w io.Writer, md bool, s *Sim) {
	fmt.Fprintf(w, "Simulation (virtual clock, algorithm level: each algorithm decides the whole stream centrally; no fleet, no Redis), rule %s, %v of traffic, seed %d.\n", s.Rule, s.Duration, s.Seed)
	if len(s.Counting) > 0 {
		fmt.Fprintf(w, "\nCounting the same random traffic (%s), estimate − exact sliding count, as a fraction of L:\n\n", s.CountTraffic)
		var rows [][]string
		for _, r := range s.Counting {
			rows = append(rows, []string{r.Algorithm, pct(r.MeanAbs), "+" + pct(r.MaxOver), "−" + pct(-r.MaxUnder)})
		}
		table(w, md, []string{"algorithm", "mean |error|", "most over", "most under"}, rows)
	}
	fmt.Fprintf(w, "\nLimiting (over-admission against the exact sliding log; utilization of keys offered ≥ 2L; false denials of keys offered ≤ 0.9L; wrong decisions against the exact log):\n\n")
	for _, t := range s.Traffic {
		fmt.Fprintf(w, "  %s\n", t)
	}
	fmt.Fprintln(w)
	var rows [][]string
	for _, r := range s.Limiting {
		a := &r.Accuracy
		rows = append(rows, []string{r.Profile, r.Algorithm, fmt.Sprint(a.Checks), fmt.Sprint(a.LimitedKeys),
			pct(a.OverMax), pct(a.OverP99), util(a),
			fmt.Sprintf("%d (%d keys)", a.FalseDenials, a.FalseDenialKeys), pct(a.WrongRate),
			pct(a.WrongAdmitRate), pct(a.WrongDenyRate)})
	}
	table(w, md, []string{"traffic", "algorithm", "checks", "limited keys", "over-adm max", "p99", "utilization (min)", "false denials", "wrong decisions", "wrongly admitted", "wrongly denied"}, rows)
}
