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
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/lat"
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
	// Paced: the checks follow a schedule (every one is timed); false for
	// the throughput profile (1 in 64 timed).
	Paced bool `json:"paced"`
	// Operation: an operations profile (shift, deploy, reload,
	// store-loss), whose verdict also judges that no check returned an
	// error.
	Operation bool `json:"operation,omitempty"`
}

// Cost is what a scenario cost in throughput, latency and store traffic.
type Cost struct {
	Checks       int64     `json:"checks"`
	ChecksPerSec float64   `json:"checks_per_sec"`
	PerInstance  []float64 `json:"checks_per_sec_per_instance"`
	Errors       int64     `json:"errors"`
	// Allow's latency of the timed checks (every check when paced, 1 in 64
	// flat out): p50, p99, p99.9 exact, the max, and the samples.
	LatencyP50    Dur    `json:"latency_p50"`
	LatencyP99    Dur    `json:"latency_p99"`
	LatencyP999   Dur    `json:"latency_p999"`
	LatencyMax    Dur    `json:"latency_max"`
	LatencySample uint64 `json:"latency_samples"`
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
	// Ambiguous counts the checks whose decision time is known only modulo
	// a period, AmbiguousAdmitted the admitted ones among them (the oracle
	// counts those only where every possible time would).
	Ambiguous         int64 `json:"ambiguous_decision_times,omitempty"`
	AmbiguousAdmitted int64 `json:"ambiguous_admissions,omitempty"`
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
	// Waits says which checks waited for Redis, and why.
	Waits Waits `json:"waits"`
	// Peers are bare local limiters checked right after the scenario by
	// the same kind of workers on the same schedule and keys.
	Peers []Peer `json:"peers,omitempty"`
	// Machine says how busy the machine was while the scenario ran (nil:
	// not measured).
	Machine *Machine `json:"machine,omitempty"`
}

// Peer is a bare local limiter's cost beside sluice's (fleet.RunPeer).
type Peer struct {
	Name         string        `json:"name"`
	Duration     Dur           `json:"duration"`
	Checks       int64         `json:"checks"`
	ChecksPerSec float64       `json:"checks_per_sec"`
	Latency      lat.Quantiles `json:"latency"`
	Every        int           `json:"timed_every"`
}

// Waits says which checks waited for Redis and why, from what the library
// exports (each instance's sluice.checks metric by path, read through an
// OpenTelemetry ManualReader, and Limiter.Stats), and how Allow's latency
// splits between the checks of keys offered above their limit around the
// check and the others (the oracle: oracle.Latency).
type Waits struct {
	// Read is false if the metrics could not be read (the counts by path
	// are then 0).
	Read bool `json:"read"`
	// Checks by path, fleet-wide: decided locally, or by Redis after a
	// wait: Urgent (an Eventual key at its divergence cap, or a key the
	// cache does not track: Untracked of them), Strict (a Strict rule),
	// Fallback (Redis failed or did not answer within the timeout; the
	// failure mode decided).
	Checks    int64 `json:"checks"`
	Local     int64 `json:"local"`
	Urgent    int64 `json:"urgent"`
	Untracked int64 `json:"untracked"`
	Strict    int64 `json:"strict"`
	Fallback  int64 `json:"fallback"`
	// From Limiter.Stats: the urgent round trips that carried the waiting
	// checks (Sync.UrgentCycles), the reservations Redis decided in them,
	// and the early syncs made in the background, for which no check
	// waited.
	UrgentCycles int64 `json:"urgent_cycles"`
	Reservations int64 `json:"reservations"`
	EarlySyncs   int64 `json:"early_syncs"`
	// Why: the urgent checks of Eventual keys by why their instance had no
	// local allowance left (Limiter.Stats().Sync.Waits).
	Why sluice.SyncWaits `json:"why"`
	// Latency splits the timed checks by the key's load (oracle).
	Latency oracle.Latency `json:"latency"`
	// Every: 1 in Every checks was timed.
	Every int `json:"timed_every"`
}

// Waited returns the checks Redis decided: those that waited for it.
func (w *Waits) Waited() int64 { return w.Urgent + w.Strict + w.Fallback }

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

// Style says how Text lays the report out.
type Style struct {
	// Markdown writes Markdown tables, with every column.
	Markdown bool
	// Wide writes every column; without it (and without Markdown) the text
	// tables leave some out and fit in Width columns.
	Wide bool
}

// Width is the most columns the default text output takes (tables, legends
// and notes), for a terminal or a log viewer.
const Width = 120

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
	textTable(w, [][]string{head}, rows, tabwriter.AlignRight)
}

// textTable writes an aligned text table with one or more header rows,
// without trailing blanks.
func textTable(w io.Writer, heads, rows [][]string, flags uint) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', flags)
	for _, h := range heads {
		fmt.Fprintf(tw, "%s\t\n", strings.Join(h, "\t"))
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t\n", strings.Join(r, "\t"))
	}
	tw.Flush()
	for _, l := range strings.SplitAfter(b.String(), "\n") {
		if l != "" {
			fmt.Fprintln(w, strings.TrimRight(l, " \n"))
		}
	}
}

// column is one column of a scenario table: its header in the wide and
// Markdown tables, its header in the compact text table (two rows; none:
// the compact table leaves the column out), and its cells, which may be
// shorter in the compact table.
type column struct {
	head    string
	compact [2]string
	cell    func(s *Scenario) string
	short   func(s *Scenario) string // the compact cell; nil: cell
}

// scenarioTable writes one row per scenario.
func scenarioTable(w io.Writer, st Style, cols []column, ss []Scenario) {
	wide := st.Wide || st.Markdown
	var heads [2][]string
	var head []string
	var rows [][]string
	for _, c := range cols {
		if wide {
			head = append(head, c.head)
		} else if c.compact != [2]string{} {
			heads[0] = append(heads[0], c.compact[0])
			heads[1] = append(heads[1], c.compact[1])
		}
	}
	for i := range ss {
		var row []string
		for _, c := range cols {
			switch {
			case wide:
				row = append(row, c.cell(&ss[i]))
			case c.compact == [2]string{}:
			case c.short != nil:
				row = append(row, c.short(&ss[i]))
			default:
				row = append(row, c.cell(&ss[i]))
			}
		}
		rows = append(rows, row)
	}
	if wide {
		table(w, st.Markdown, head, rows)
		return
	}
	textTable(w, heads[:], rows, tabwriter.AlignRight)
}

// label names a scenario in the tables: its profile, or the sweep point.
func label(s *Scenario) string {
	if s.Settings.Sweep != "" {
		return s.Settings.Profile + " " + s.Settings.Sweep
	}
	return s.Name
}

// pct1 formats a fraction as a percentage with one decimal.
func pct1(f float64) string {
	if f == 0 {
		return "0"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

// signed formats a fraction as a signed percentage: "+0.600%".
func signed(f float64) string {
	switch {
	case f > 0:
		return "+" + pct(f)
	case f < 0:
		return "−" + pct(-f)
	}
	return "0"
}

var scenarioCol = column{head: "scenario", compact: [2]string{"", "scenario"}, cell: label}

// accuracyCols are the accuracy table's columns.
var accuracyCols = []column{
	scenarioCol,
	{head: "checks", cell: func(s *Scenario) string { return fmt.Sprint(s.Accuracy.Checks) }},
	{head: "limited keys", compact: [2]string{"limited", "keys"}, cell: func(s *Scenario) string { return fmt.Sprint(s.Accuracy.LimitedKeys) }},
	{head: "over-adm fleet max/p99", compact: [2]string{"over-adm", "(fleet)"},
		cell:  func(s *Scenario) string { return pct(s.Accuracy.OverMax) + " / " + pct(s.Accuracy.OverP99) },
		short: func(s *Scenario) string { return pct(s.Accuracy.OverMax) }},
	{head: "algorithm alone max/p99", compact: [2]string{"algorithm", "alone"},
		cell:  func(s *Scenario) string { return pct(s.Accuracy.AlgoOverMax) + " / " + pct(s.Accuracy.AlgoOverP99) },
		short: func(s *Scenario) string { return pct(s.Accuracy.AlgoOverMax) }},
	{head: "fleet excess max/p99", compact: [2]string{"fleet", "excess"},
		cell:  func(s *Scenario) string { return pct(s.Accuracy.ExcessMax) + " / " + pct(s.Accuracy.ExcessP99) },
		short: func(s *Scenario) string { return signed(s.Accuracy.ExcessMax) }},
	{head: "fleet in own estimate (≤ ε)", cell: func(s *Scenario) string {
		a := &s.Accuracy
		bound := "✓"
		if a.EstimateOverMax > s.Settings.ErrorBudget+1e-9 {
			bound = "✗ over ε"
		}
		return pct(a.EstimateOverMax) + " " + bound
	}},
	{head: "utilization (min)", compact: [2]string{"utilization", "(lowest key)"}, cell: func(s *Scenario) string { return util(&s.Accuracy) },
		short: func(s *Scenario) string {
			if s.Accuracy.HotKeys == 0 {
				return "–"
			}
			return pct1(s.Accuracy.UtilizationMin)
		}},
	{head: "false denials", compact: [2]string{"false", "denials"},
		cell: func(s *Scenario) string {
			return fmt.Sprintf("%d of %d keys", s.Accuracy.FalseDenialKeys, s.Accuracy.QuietKeys)
		},
		short: func(s *Scenario) string {
			return fmt.Sprintf("%d of %d", s.Accuracy.FalseDenialKeys, s.Accuracy.QuietKeys)
		}},
	{head: "wrong decisions", compact: [2]string{"wrong decisions", "(algorithm alone)"}, cell: func(s *Scenario) string { return pct(s.Accuracy.WrongRate) },
		short: func(s *Scenario) string {
			return pct(s.Accuracy.WrongRate) + " (" + pct(s.Accuracy.AlgoWrongRate) + ")"
		}},
	{head: "fleet≠central", cell: func(s *Scenario) string { return pct(s.Accuracy.DisagreeRate) }},
}

// AccuracyTable writes the accuracy table.
func AccuracyTable(w io.Writer, st Style, ss []Scenario) { scenarioTable(w, st, accuracyCols, ss) }

// costCols are the cost table's columns.
var costCols = []column{
	scenarioCol,
	{head: "checks/s", compact: [2]string{"", "checks/s"}, cell: func(s *Scenario) string { return rate(s.Cost.ChecksPerSec) }},
	{head: "per instance", cell: func(s *Scenario) string {
		c := &s.Cost
		if len(c.PerInstance) == 0 {
			return "–"
		}
		lo, hi := c.PerInstance[0], c.PerInstance[0]
		for _, x := range c.PerInstance {
			lo, hi = min(lo, x), max(hi, x)
		}
		return rate(lo) + "–" + rate(hi)
	}},
	{head: "Allow p50", compact: [2]string{"Allow", "p50"}, cell: func(s *Scenario) string { return dur(s.Cost.LatencyP50) }},
	{head: "p99", compact: [2]string{"", "p99"}, cell: func(s *Scenario) string { return dur(s.Cost.LatencyP99) }},
	{head: "p99.9", compact: [2]string{"", "p99.9"}, cell: func(s *Scenario) string { return dur(s.Cost.LatencyP999) }},
	{head: "Redis cmds/s/inst", compact: [2]string{"Redis", "cmds/s"}, cell: func(s *Scenario) string { return rate(s.Cost.CommandsPerSec) }},
	{head: "round trips/s/inst", compact: [2]string{"round", "trips/s"}, cell: func(s *Scenario) string { return rate(s.Cost.RoundTripsPerSec) }},
	{head: "urgent syncs/s/inst", cell: func(s *Scenario) string { return rate(s.Cost.UrgentPerSec) }},
	{head: "urgent syncs/window (fleet)", compact: [2]string{"urgent", "syncs/W"}, cell: func(s *Scenario) string { return fmt.Sprintf("%.0f", s.Cost.UrgentPerWindow) }},
	{head: "sync cycle p50 (max)", compact: [2]string{"sync cycle", "p50 (max)"}, cell: func(s *Scenario) string {
		return dur(s.Cost.CycleP50) + " (" + dur(s.Cost.CycleMax) + ")"
	}},
	{head: "N̂", compact: [2]string{"", "N̂"}, cell: func(s *Scenario) string {
		c := &s.Cost
		if c.NHatMax != c.NHatMin {
			return fmt.Sprintf("%d–%d", c.NHatMin, c.NHatMax)
		}
		return fmt.Sprint(c.NHatMin)
	}},
	{head: "clock spread", cell: func(s *Scenario) string { return dur(s.Cost.ClockSpread) }},
}

// CostTable writes the throughput, latency and store-traffic table.
func CostTable(w io.Writer, st Style, ss []Scenario) { scenarioTable(w, st, costCols, ss) }

// count formats a count with thin grouping: 1234567 → "1.23M", small ones
// whole.
func count(n int64) string {
	if n < 10_000 {
		return fmt.Sprint(n)
	}
	return rate(float64(n))
}

// share formats n of total as "n (x%)".
func share(n, total int64) string {
	if n == 0 || total == 0 {
		return count(n)
	}
	return count(n) + " (" + pct1(float64(n)/float64(total)) + ")"
}

// waitsCols are the columns of the table of which checks waited.
var waitsCols = []column{
	scenarioCol,
	{head: "decided by Redis (waited)", compact: [2]string{"waited for", "Redis"}, cell: func(s *Scenario) string {
		if !s.Waits.Read {
			return "?"
		}
		return share(s.Waits.Waited(), s.Waits.Checks)
	}},
	{head: "urgent (at cap)", cell: func(s *Scenario) string { return count(s.Waits.Urgent - s.Waits.Untracked) },
		compact: [2]string{"urgent /", "fallback"}, short: func(s *Scenario) string {
			return count(s.Waits.Urgent) + " / " + count(s.Waits.Fallback)
		}},
	{head: "untracked", cell: func(s *Scenario) string { return count(s.Waits.Untracked) }},
	{head: "strict", cell: func(s *Scenario) string { return count(s.Waits.Strict) }},
	{head: "fallback", cell: func(s *Scenario) string { return count(s.Waits.Fallback) }},
	{head: "urgent round trips", compact: [2]string{"urgent", "trips"}, cell: func(s *Scenario) string { return count(s.Waits.UrgentCycles) }},
	{head: "reservations", cell: func(s *Scenario) string { return count(s.Waits.Reservations) }},
	{head: "early syncs (no wait)", cell: func(s *Scenario) string { return count(s.Waits.EarlySyncs) }},
	{head: "checks of keys > L", compact: [2]string{"checks of", "keys > L"}, cell: func(s *Scenario) string {
		l := &s.Waits.Latency
		if l.Checks == 0 {
			return "0"
		}
		return pct1(float64(l.OverChecks) / float64(l.Checks))
	}},
	{head: "timed", cell: func(s *Scenario) string {
		if s.Waits.Every > 1 {
			return fmt.Sprintf("%s (1 in %d)", count(int64(s.Waits.Latency.All.N)), s.Waits.Every)
		}
		return count(int64(s.Waits.Latency.All.N))
	}},
	{head: "slow ≥ 50µs: keys > L / ≤ L", compact: [2]string{"slow ≥ 50µs", "> L / ≤ L"}, cell: func(s *Scenario) string {
		l := &s.Waits.Latency
		return count(int64(l.Over.Slow)) + " / " + count(int64(l.Within.Slow))
	}},
	{head: "slow with no round trip (CPU): > L / ≤ L", compact: [2]string{"of them CPU", "> L / ≤ L"}, cell: func(s *Scenario) string {
		l := &s.Waits.Latency
		return count(int64(l.Over.Slow-l.SlowTripOver)) + " / " + count(int64(l.Within.Slow-l.SlowTripWithin))
	}},
	{head: "Allow p99.9: all / keys ≤ L", compact: [2]string{"Allow p99.9", "all / keys ≤ L"}, cell: func(s *Scenario) string {
		return p999Text(&s.Waits.Latency)
	}},
}

// p999Text formats Allow's p99.9 over all timed checks and over those of
// keys within their limit ("–": none).
func p999Text(l *oracle.Latency) string {
	within := "–"
	if l.Within.N > 0 {
		within = dur(Dur(l.Within.P999))
	}
	return dur(Dur(l.All.P999)) + " / " + within
}

// PeersTable writes Allow's latency of sluice beside the bare local
// limiters checked in the same run, for the scenarios that have them.
func PeersTable(w io.Writer, st Style, ss []Scenario) {
	var rows [][]string
	for i := range ss {
		s := &ss[i]
		if len(s.Peers) == 0 {
			continue
		}
		l := &s.Waits.Latency
		rows = append(rows, []string{label(s), "sluice (fleet, Redis)", dur(Dur(s.Settings.Duration)), rate(s.Cost.ChecksPerSec),
			dur(Dur(l.All.P50)), dur(Dur(l.All.P99)), dur(Dur(l.All.P999)), everyText(l.All.N, s.Waits.Every)})
		for _, p := range s.Peers {
			rows = append(rows, []string{"", p.Name, dur(p.Duration), rate(p.ChecksPerSec), dur(Dur(p.Latency.P50)),
				dur(Dur(p.Latency.P99)), dur(Dur(p.Latency.P999)), everyText(p.Latency.N, p.Every)})
		}
	}
	if len(rows) == 0 {
		return
	}
	head := []string{"scenario", "limiter", "ran", "checks/s", "Allow p50", "p99", "p99.9", "timed checks"}
	if st.Markdown {
		fmt.Fprintf(w, "\nAllow beside bare local limiters (same workers, schedule and keys, checked right after the scenario):\n\n")
		table(w, true, head, rows)
		return
	}
	fmt.Fprintf(w, "\nAllow beside bare local limiters, checked right after the scenario by the same workers on the same schedule and keys:\n\n")
	table(w, false, head, rows)
	legend(w, st, peersLegend)
}

// everyText formats a sample count and its rate: "15.2k (1 in 64)".
func everyText(n, every int) string {
	if every > 1 {
		return fmt.Sprintf("%s (1 in %d)", count(int64(n)), every)
	}
	return count(int64(n))
}

// WaitsTable writes which checks waited for Redis, and why.
func WaitsTable(w io.Writer, st Style, ss []Scenario) { scenarioTable(w, st, waitsCols, ss) }

// The legends under the tables: one line for each figure that may look
// alarming, saying what it counts. Wide ones explain the columns only the
// wide tables have.
var (
	accuracyLegend = []string{
		"over-adm (fleet): the most admitted in any real window (t−W, t] ÷ L − 1; worst of the keys offered more than L.",
		"algorithm alone: the same checks decided centrally by the same algorithm: its own approximation, not the fleet's.",
		"fleet excess: over-adm − algorithm alone, per key: what running as a fleet adds, bounded by the error budget ε.",
		"utilization: admitted ÷ what an exact limiter admits, of the keys offered ≥ 2·L; over 100 % is the over-admission.",
		"false denials: keys denied though never offered above 0.9·L in any window, of all such keys.",
		"wrong decisions: unlike an exact central sliding log replaying the merged stream: mostly the algorithm's own " +
			"approximation (in parentheses: the algorithm alone) and timing, not fleet errors.",
	}
	accuracyWideLegend = []string{
		"fleet in own estimate: the fleet's admissions as the algorithm counts them (max E(t) ÷ L − 1); the cap keeps it ≤ ε.",
		"fleet≠central: checks the fleet decided unlike the same algorithm run centrally (sync lag and timing).",
	}
	costLegend = []string{
		"Allow p50, p99, p99.9: every check of a paced profile, 1 in 64 flat out; the slow ones waited for Redis (a key at " +
			"its cap; at most -timeout) or for a busy CPU (the table of waits below says which).",
		"Redis cmds/s, round trips/s: per instance; urgent syncs/W: syncs forced by keys at their cap, fleet-wide per window.",
		"sync cycle: one sync's Redis round trip, median (max); N̂: the live instances each limiter counted.",
	}
	waitsLegend = []string{
		"waited for Redis: the checks a limiter handed to Redis and waited for (each instance's sluice.checks metric by path): " +
			"urgent, an Eventual key whose instance used its share (its divergence cap) — expected only of keys offered above L; " +
			"fallback, Redis failed or did not answer within -timeout and the failure mode decided, after the wait.",
		"urgent trips: the round trips that carried them (Limiter.Stats); -wide adds the early syncs: keys synced in the " +
			"background before their share ran out, for which no check waited.",
		"keys > L: checks made while their key was offered above L in a window holding the check; ≤ L: the others, where no " +
			"check should wait. slow: timed checks of at least 50 µs (1 in 64 checks is timed flat out, every check when paced); " +
			"CPU: slow though their instance had no round trip to Redis for checks during the call (Limiter.Stats), so they " +
			"waited for a CPU.",
	}
	peersLegend = []string{
		"x/time/rate: golang.org/x/time/rate, a token bucket per key (limit per window, burst the limit, behind a mutex) " +
			"in an xsync.MapOf: the usual Go limiter, the cost of a local check with nothing to keep in step.",
		"sluice Local: the same rule in Mode Local, metrics on: sluice without the store, so the difference to the fleet " +
			"row is what the fleet's bookkeeping costs a check. Each peer runs as long as a paced scenario (as many timed checks), " +
			"the first half second of a flat-out one.",
	}
	costWideLegend = []string{
		"clock spread: how far apart the instances' views of the store clock were (one shared wall clock: measurement error).",
	}
)

// legend writes legend lines, wrapped to Width, in text mode.
func legend(w io.Writer, st Style, lines ...[]string) {
	if st.Markdown {
		return
	}
	fmt.Fprintln(w)
	for _, ls := range lines {
		for _, l := range ls {
			fmt.Fprint(w, wrap(l, Width, "  ", "    "))
		}
	}
}

// wrap breaks text into lines of at most width runes (a word longer than
// that stays whole), the first indented by first, the others by rest.
func wrap(text string, width int, first, rest string) string {
	var b strings.Builder
	line, n := first, utf8.RuneCountInString(first)
	empty := true
	for _, word := range strings.Fields(text) {
		wn := utf8.RuneCountInString(word)
		if !empty && n+1+wn > width {
			b.WriteString(line + "\n")
			line, n, empty = rest, utf8.RuneCountInString(rest), true
		}
		if !empty {
			line += " "
			n++
		}
		line += word
		n += wn
		empty = false
	}
	b.WriteString(line + "\n")
	return b.String()
}

// Text writes the whole report as text or Markdown, and ends it with the
// time the run took and, for a fleet run, the verdict.
func Text(w io.Writer, st Style, r *Run) {
	if r.Sim != nil {
		SimText(w, st.Markdown, r.Sim)
	}
	if len(r.Scenarios) > 0 {
		fleetText(w, st, r)
	}
	fmt.Fprintf(w, "\ntook %v\n", time.Duration(r.Took).Round(100*time.Millisecond))
	if len(r.Scenarios) > 0 {
		VerdictText(w, st, r.Scenarios)
	}
}

// line writes a prose line: wrapped to Width in text mode, as is in
// Markdown.
func line(w io.Writer, st Style, text string) {
	if st.Markdown {
		fmt.Fprintln(w, text)
		return
	}
	fmt.Fprint(w, wrap(text, Width, "", "  "))
}

func fleetText(w io.Writer, st Style, r *Run) {
	wide := st.Wide || st.Markdown
	s0 := r.Scenarios[0].Settings
	fmt.Fprintln(w)
	line(w, st, fmt.Sprintf("Fleet: %d instances%s, %d workers each; rule %s; sync %v; error budget ε = %s; store: %s",
		s0.Instances, map[bool]string{true: " (separate processes)", false: " (one process)"}[s0.Procs], s0.Workers, s0.Rule, s0.SyncInterval, pct(s0.ErrorBudget), r.Store))
	if st.Markdown {
		// docs/accuracy.md explains the columns itself.
		fmt.Fprintf(w, "\nAccuracy (over-admission: max over t of admitted in (t−W, t] ÷ L − 1, over keys offered > L; \"algorithm alone\" = the same algorithm run centrally on the same checks; \"fleet excess\" = fleet − algorithm alone, per key; \"own estimate\" = the fleet's admissions as the algorithm counts them, which the error budget bounds; wrong decisions against an exact central sliding log):\n\n")
	} else if wide {
		fmt.Fprintf(w, "\nAccuracy, against an exact sliding log and against the same algorithm run centrally:\n\n")
	} else {
		fmt.Fprintf(w, "\nAccuracy, against an exact sliding log and against the same algorithm run centrally (-wide: every column):\n\n")
	}
	AccuracyTable(w, st, r.Scenarios)
	if wide {
		legend(w, st, accuracyLegend, accuracyWideLegend)
	} else {
		legend(w, st, accuracyLegend)
	}
	if st.Markdown {
		fmt.Fprintf(w, "\nCost (Allow latency sampled 1 in 64; Redis traffic from Limiter.Stats, per instance per second; N̂ = live instances seen; clock spread = how far apart the instances' store-clock offsets were):\n\n")
	} else {
		fmt.Fprintf(w, "\nCost: throughput, latency and Redis traffic (from Limiter.Stats):\n\n")
	}
	CostTable(w, st, r.Scenarios)
	if wide {
		legend(w, st, costLegend, costWideLegend)
	} else {
		legend(w, st, costLegend)
	}
	if st.Markdown {
		fmt.Fprintf(w, "\nWhich checks waited for Redis, and why (sluice.checks by path, Limiter.Stats; keys > L: offered above L in a window holding the check):\n\n")
	} else {
		fmt.Fprintf(w, "\nWhich checks waited for Redis, and why (from each limiter's metrics and Limiter.Stats; -wide: every column):\n\n")
	}
	WaitsTable(w, st, r.Scenarios)
	legend(w, st, waitsLegend)
	PeersTable(w, st, r.Scenarios)
	fmt.Fprintln(w)
	if r.LocalBytesPerKey > 0 {
		text := fmt.Sprintf("Memory: %.0f bytes per tracked key in the local cache (heap growth over 100k keys of rule %s)", r.LocalBytesPerKey, s0.Rule)
		var rb []string
		for _, s := range r.Scenarios {
			if s.Cost.RedisBytesPerKey > 0 {
				rb = append(rb, fmt.Sprintf("%s %.0f", label(&s), s.Cost.RedisBytesPerKey))
			}
		}
		if len(rb) > 0 {
			text += fmt.Sprintf("; in Redis (MEMORY USAGE, sampled keys), bytes per key: %s", strings.Join(rb, ", "))
		} else {
			text += "; in Redis: not measured (needs a real Redis: MEMORY USAGE)"
		}
		line(w, st, text+".")
	}
	for _, s := range r.Scenarios {
		for _, n := range s.Notes {
			line(w, st, fmt.Sprintf("note (%s): %s", label(&s), n))
		}
	}
	for _, n := range r.Notes {
		line(w, st, "note: "+n)
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
