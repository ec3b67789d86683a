package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/lat"
	"github.com/sluicehq/sluice/syncer"
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
	// PromiseNoErrors: no check returned an error (judged on the
	// operations profiles: a reload, a deploy, traffic that moves or a
	// store that lost its state answers every check with a decision).
	PromiseNoErrors = "no check errors"
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
	// Alone is, for a broken utilization promise, the lowest utilization
	// of the rule's algorithm run centrally on the same checks: the part
	// of the loss that is the algorithm's own, which the summary line
	// gives beside the figure.
	Alone string
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
//   - no check errors, on the operations profiles only (Settings.Operation):
//     every check returned a decision, none an error (ErrUnknownRule while
//     a reload is half applied, for example).
//
// Allow's latency is not among the promises: sluice bounds only how long a
// check waits for the store (Options.Timeout); the measured latency also
// holds the load generator's scheduling on a shared machine. VerdictText
// shows it against LatencyTarget, and Why says why it was slow.
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
		if !use.Held {
			use.Alone = pct1(a.AlgoUtilizationMin)
		}
	} else {
		use.Figure = "no key offered ≥ 2·L"
	}
	checks := []Check{over, deny, use}
	if s.Settings.Operation {
		n := s.Cost.Errors
		errs := Check{Promise: PromiseNoErrors, Exercised: true, Held: n == 0}
		errs.Figure = count(n) + " errors"
		checks = append(checks, errs)
	}
	return checks
}

// verdictLegend explains the verdict's columns, one line each.
var verdictLegend = []string{
	"fleet's over-admission: per key, the most admitted in any real window ÷ L − 1, less the algorithm's own (not judged).",
	"no false denials: keys never offered above 0.9·L in any window are never denied (shown: how many were, of how many).",
	"utilization: each key offered ≥ 2·L gets at least 90 % of what an exact limiter admits (the lowest key; throughput: " +
		"on the windows wholly inside the run). –: nothing to judge.",
	"no check errors (operations profiles only): no check returned an error (shown: how many did).",
	"p99.9 (≤ L): Allow's p99.9 over the checks of keys not offered above L in a window holding the check, whose target " +
		"is 50 µs (✓, ✗: a target on this machine, not a promise; –: no such check); under the table, why a p99.9 (theirs, " +
		"or all checks') above 50 µs was slow.",
}

// LatencyTarget is Allow's p99.9 target for the checks of keys within
// their limit (issue 17): above it, a check waited for Redis or a CPU.
const LatencyTarget = lat.Slow

// LatencyMet reports whether the p99.9 of the checks of keys within their
// limit met LatencyTarget, and whether there were any.
func LatencyMet(s *Scenario) (met, any bool) {
	l := &s.Waits.Latency
	return l.Within.P999 <= LatencyTarget, l.Within.N > 0
}

// Why says why a scenario's Allow p99.9 (all checks, or those of keys
// within their limit) is above LatencyTarget: how many of the slow timed
// checks ran while their instance had a round trip to Redis for checks
// (they may have waited for it) and how many with none (they waited for a
// CPU), and what Redis decided, and for keys within their limit the bare
// local limiters' p99.9 if they ran; "" if neither p99.9 is above the
// target.
func Why(s *Scenario) string {
	w := &s.Waits
	l := &w.Latency
	if l.All.P999 <= LatencyTarget && l.Within.P999 <= LatencyTarget {
		return ""
	}
	redis := fmt.Sprintf("Redis decided %s checks in all (%s)", count(w.Waited()), waitedText(w))
	if !w.Read {
		redis = "the checks by path could not be read"
	}
	if l.Within.P999 > LatencyTarget {
		near := ""
		if l.SlowNear > 0 {
			near = fmt.Sprintf("; %d of the slow ones while their key was offered above 0.9·L (no lease is granted from the last tenth of the limit), and p99.9 %s over the checks of keys offered at most 0.9·L", l.SlowNear, dur(Dur(l.Below.P999)))
		}
		return "keys ≤ L: " + slowText(l.Within.Slow, l.SlowTripWithin, w.Every) + near + "; " + redis + peersText(s)
	}
	return "keys > L: " + slowText(l.Over.Slow, l.SlowTripOver, w.Every) + "; " + redis
}

// peersText gives the bare local limiters' p99.9 on the same workers,
// schedule and keys (the machine's own tail, with no store), or "" if the
// scenario has none.
func peersText(s *Scenario) string {
	if len(s.Peers) == 0 {
		return ""
	}
	parts := make([]string, len(s.Peers))
	for i, p := range s.Peers {
		parts[i] = fmt.Sprintf("%s %s", p.Name, dur(Dur(p.Latency.P999)))
	}
	return "; p99.9 of bare local limiters on the same schedule: " + strings.Join(parts, ", ")
}

// slowText says how many slow checks there were, and how many of them ran
// with and without a round trip of their instance to Redis.
func slowText(slow, trip, every int) string {
	timed := ""
	if every > 1 {
		timed = fmt.Sprintf(" of the 1 in %d checks timed", every)
	}
	switch {
	case trip == 0:
		return fmt.Sprintf("CPU: %d slow (≥ %v)%s, none during a round trip of its instance to Redis", slow, LatencyTarget, timed)
	case trip == slow:
		return fmt.Sprintf("Redis: %d slow (≥ %v)%s, all during a round trip of their instance to Redis", slow, LatencyTarget, timed)
	}
	return fmt.Sprintf("%d slow (≥ %v)%s: %d during a round trip of their instance to Redis, %d with none (CPU)", slow, LatencyTarget, timed, trip, slow-trip)
}

// whyText says why urgent checks' keys had no local allowance left, or ""
// if none was counted.
func whyText(y syncer.Waits) string {
	var parts []string
	for _, p := range []struct {
		n    int64
		text string
	}{
		{y.Near, "near the limit (no lease from its last tenth)"},
		{y.New, "never synced yet (hit at once)"},
		{y.Start, "a sub-window's start (the last one's lease ended)"},
		{y.Lease, "the sub-window's lease used up"},
		{y.Cap, "no lease, the cap used up"},
	} {
		if p.n > 0 {
			parts = append(parts, count(p.n)+" "+p.text)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// waitedText lists the checks Redis decided by reason.
func waitedText(w *Waits) string {
	var parts []string
	if n := w.Urgent - w.Untracked; n > 0 {
		parts = append(parts, fmt.Sprintf("%s urgent: keys at their cap%s, in %s round trips", count(n), whyText(w.Why), count(w.UrgentCycles)))
	}
	if w.Untracked > 0 {
		parts = append(parts, count(w.Untracked)+" untracked keys")
	}
	if w.Strict > 0 {
		parts = append(parts, count(w.Strict)+" strict")
	}
	if w.Fallback > 0 {
		parts = append(parts, count(w.Fallback)+" fallback: Redis failed or was too slow")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
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
	ops := false
	for i := range ss {
		ops = ops || ss[i].Settings.Operation
	}
	head := []string{"profile", PromiseOverAdmission, PromiseNoFalseDenial, PromiseUtilization}
	if ops {
		head = append(head, PromiseNoErrors)
	}
	head = append(head, "p99.9 (≤ L)")
	var rows [][]string
	var broken, whys []string
	judged, idle := 0, 0
	fast, timed := 0, 0
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
				figure := c.Figure
				if c.Alone != "" {
					figure += "; the algorithm alone, run centrally: " + c.Alone
				}
				broken = append(broken, fmt.Sprintf("%s: %s (%s)", label(s), c.Promise, figure))
			}
		}
		if ops && !s.Settings.Operation {
			row = append(row, "–") // not judged on this profile
		}
		l := &s.Waits.Latency
		cell := "–"
		if met, any := LatencyMet(s); any {
			cell = dur(Dur(l.Within.P999))
			timed++
			if met {
				fast++
				cell += " ✓"
			} else {
				cell += " ✗"
			}
		}
		rows = append(rows, append(row, cell))
		if why := Why(s); why != "" {
			whys = append(whys, fmt.Sprintf("%s, p99.9 %s: %s.", label(s), p999Text(l), why))
		}
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
	if timed > 0 {
		summary += fmt.Sprintf("; Allow p99.9 of the keys within their limit ≤ %v on %d of %s", LatencyTarget, fast, profiles(timed))
	}
	if st.Markdown {
		fmt.Fprintf(w, "\n**%s:**\n\n", title)
		table(w, true, head, rows)
		fmt.Fprintln(w)
		for _, y := range whys {
			fmt.Fprintf(w, "- %s\n", y)
		}
		fmt.Fprintf(w, "\n**Verdict: %s.**\n", summary)
		return
	}
	fmt.Fprintf(w, "\n%s:\n\n", title)
	textTable(w, [][]string{head}, rows, 0)
	if len(whys) > 0 {
		fmt.Fprintln(w)
		for _, y := range whys {
			fmt.Fprint(w, wrap(y, Width, "  ", "    "))
		}
	}
	fmt.Fprintln(w)
	for _, l := range verdictLegend {
		if !ops && strings.HasPrefix(l, PromiseNoErrors) {
			continue
		}
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
