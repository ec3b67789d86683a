package report

import (
	"fmt"
	"io"
	"strings"
)

// MinUtilization is the utilization promised to keys offered at least 2·L
// in some window: each gets at least this share of what an exact limiter
// admits.
const MinUtilization = 0.9

// The promises the verdict judges, as its table heads them.
const (
	// PromiseOverAdmission: the fleet's part of the real-window
	// over-admission is at most ε.
	PromiseOverAdmission = "fleet's over-admission ≤ ε"
	// PromiseNoFalseDenial: keys never offered above 0.9·L are never denied.
	PromiseNoFalseDenial = "no false denials"
	// PromiseUtilization: keys offered ≥ 2·L get ≥ MinUtilization.
	PromiseUtilization = "utilization ≥ 90 %"
)

// Check is one promise judged on one scenario.
type Check struct {
	// Promise is one of the Promise constants.
	Promise string
	// Exercised is false when the scenario had no key the promise is
	// about (no key offered above L, below 0.9·L, or at 2·L): nothing to
	// judge.
	Exercised bool
	// Held says whether the promise held (when exercised).
	Held bool
	// Figure is the measured value, as the verdict shows it.
	Figure string
}

// Mark is the check's sign: ✓ held, ✗ broken, – not exercised.
func (c Check) Mark() string {
	switch {
	case !c.Exercised:
		return "–"
	case c.Held:
		return "✓"
	}
	return "✗"
}

// Verdict judges what sluice promises on one scenario:
//
//   - over-admission: per key, the most the fleet admitted in any real
//     window (t−W, t], over L, minus 1, is split into the algorithm's own
//     error (the same algorithm deciding the same checks centrally) and the
//     fleet's part (the rest); the fleet's part, worst key, must be at most
//     the error budget ε. The algorithm's own part is shown, not judged.
//   - no false denials: keys never offered more than 0.9·L in any window
//     are never denied.
//   - utilization: every key offered at least 2·L in some window gets at
//     least MinUtilization of what an exact limiter admits.
//
// Allow's latency is not judged: sluice bounds only how long a check waits
// for the store (Options.Timeout); the measured latency also holds the
// load generator's scheduling on a shared machine.
func Verdict(s *Scenario) []Check {
	a := &s.Accuracy
	eps := s.Settings.ErrorBudget
	over := Check{Promise: PromiseOverAdmission, Exercised: a.LimitedKeys > 0, Held: a.ExcessMax <= eps+1e-9}
	if over.Exercised {
		over.Figure = signed(a.ExcessMax) + " (algorithm's own " + signed(a.AlgoOverMax) + ")"
	} else {
		over.Figure = "no key offered above L"
	}
	deny := Check{Promise: PromiseNoFalseDenial, Exercised: a.QuietKeys > 0, Held: a.FalseDenialKeys == 0}
	switch {
	case !deny.Exercised:
		deny.Figure = "no key offered ≤ 0.9·L"
	case deny.Held:
		deny.Figure = fmt.Sprintf("0 of %d denied", a.QuietKeys)
	default:
		deny.Figure = fmt.Sprintf("%d of %d denied", a.FalseDenialKeys, a.QuietKeys)
	}
	use := Check{Promise: PromiseUtilization, Exercised: a.HotKeys > 0, Held: a.UtilizationMin >= MinUtilization}
	if use.Exercised {
		use.Figure = "lowest " + pct1(a.UtilizationMin)
	} else {
		use.Figure = "no key offered ≥ 2·L"
	}
	return []Check{over, deny, use}
}

// verdictLegend explains the verdict's columns, one line each.
var verdictLegend = []string{
	"fleet's over-admission: per key, the most admitted in any real window ÷ L − 1, less the algorithm's own (not judged).",
	"no false denials: keys never offered above 0.9·L in any window are never denied (shown: how many were, of how many).",
	"utilization: each key offered ≥ 2·L gets at least 90 % of what an exact limiter admits (the lowest key).",
	"Allow p99.9: reported, not judged (sluice bounds only a check's wait for Redis, by -timeout). –: nothing to judge.",
}

// VerdictText writes the verdict, one line per scenario, then one summary
// line: all promises held, or which broke.
func VerdictText(w io.Writer, st Style, ss []Scenario) {
	eps := ss[0].Settings.ErrorBudget
	same := true
	for _, s := range ss {
		same = same && s.Settings.ErrorBudget == eps
	}
	title := "Verdict: what sluice promises, per profile"
	if same {
		title += fmt.Sprintf(" (ε = %s)", pct(eps))
	}
	head := []string{"profile", PromiseOverAdmission, PromiseNoFalseDenial, PromiseUtilization, "Allow p99.9"}
	var rows [][]string
	var broken []string
	judged, idle := 0, 0
	for i := range ss {
		s := &ss[i]
		row := []string{label(s)}
		for _, c := range Verdict(s) {
			row = append(row, c.Mark()+" "+c.Figure)
			if !c.Exercised {
				idle++
				continue
			}
			judged++
			if !c.Held {
				broken = append(broken, fmt.Sprintf("%s: %s (%s)", label(s), c.Promise, c.Figure))
			}
		}
		rows = append(rows, append(row, dur(s.Cost.LatencyP999)))
	}
	var summary string
	switch {
	case len(broken) == 1:
		summary = "1 promise broken: " + broken[0]
	case len(broken) > 1:
		summary = fmt.Sprintf("%d promises broken: %s", len(broken), strings.Join(broken, "; "))
	case judged == 0:
		summary = "nothing to judge: no key was offered above L, below 0.9·L or at 2·L"
	case idle > 0:
		summary = fmt.Sprintf("all promises held (%d judged over %s; %d had nothing to judge, marked –)", judged, profiles(len(ss)), idle)
	default:
		summary = fmt.Sprintf("all promises held (%d judged over %s)", judged, profiles(len(ss)))
	}
	if st.Markdown {
		fmt.Fprintf(w, "\n**%s:**\n\n", title)
		table(w, true, head, rows)
		fmt.Fprintf(w, "\n**Verdict: %s.**\n", summary)
		return
	}
	fmt.Fprintf(w, "\n%s:\n\n", title)
	textTable(w, [][]string{head}, rows, 0)
	fmt.Fprintln(w)
	for _, l := range verdictLegend {
		fmt.Fprint(w, wrap(l, Width, "  ", "    "))
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, wrap("Verdict: "+summary+".", Width, "", "  "))
}

// profiles says "1 profile", "8 profiles".
func profiles(n int) string {
	if n == 1 {
		return "1 profile"
	}
	return fmt.Sprintf("%d profiles", n)
}
