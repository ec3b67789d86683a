package report

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/lat"
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
	// Cause says whose a ✗ is (NoCause, for a check that held or had
	// nothing to judge), and Why says it in words.
	Cause Cause
	Why   string
}

// Cause is whose a ✗ is.
type Cause int

const (
	// NoCause: nobody's, the check held or had nothing to judge.
	NoCause Cause = iota
	// FleetFault: sluice's fleet fell short of the rule's algorithm run
	// centrally on the same checks: a broken promise.
	FleetFault
	// AlgorithmLimit: the rule's algorithm run centrally on the same
	// checks falls as short, a limit of the algorithm the docs state (a
	// sliding window frees a sub-window only once all of it has left the
	// window), not the fleet's doing: not a broken promise.
	AlgorithmLimit
	// MachineLimit: the machine, for Allow's latency: it was busy (load
	// average, CPU steal) or bare local limiters checked in the same run
	// were slow too.
	MachineLimit
	// StoreWaits: for Allow's latency, the slow checks waited for a round
	// trip of their instance to Redis (keys at their divergence cap): the
	// price of the fleet's bound, not a promise.
	StoreWaits
)

// String names the cause, as the verdict's summary counts the slow p99.9.
func (c Cause) String() string {
	switch c {
	case FleetFault:
		return "the fleet's"
	case AlgorithmLimit:
		return "the algorithm's"
	case MachineLimit:
		return "the machine's"
	case StoreWaits:
		return "Redis waits"
	}
	return ""
}

// OwnLoss is how far below the algorithm's own utilization (run centrally
// on the same checks) the fleet's may read and still be called the
// algorithm's: the two runs decide the same checks at slightly different
// times.
const OwnLoss = 0.01

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
// A false denial or a utilization below MinUtilization is the fleet's
// (FleetFault, a broken promise) only where the rule's algorithm run
// centrally on the same checks does better: where it denies as many quiet
// keys, or its lowest utilization is within OwnLoss of the fleet's, the ✗
// is the algorithm's own limit (AlgorithmLimit), shown and explained but
// not counted as broken.
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
	if over.Exercised && !over.Held {
		over.Cause = FleetFault
		over.Why = fmt.Sprintf("the fleet's fault: it admitted %s of L more than the %s run centrally on the same checks, over the error budget ε = %s",
			pct1(a.ExcessMax), algorithm(s), pct(eps))
	}
	deny := Check{Promise: PromiseNoFalseDenial, Exercised: a.QuietKeys > 0, Held: a.FalseDenialKeys == 0}
	switch {
	case !deny.Exercised:
		deny.Figure = "no key offered ≤ 0.9·L"
	case deny.Held:
		deny.Figure = fmt.Sprintf("0 of %d denied", a.QuietKeys)
	default:
		deny.Figure = fmt.Sprintf("%d of %d denied", a.FalseDenialKeys, a.QuietKeys)
		deny.Cause, deny.Why = denialCause(s)
	}
	use := Check{Promise: PromiseUtilization, Exercised: a.HotKeys > 0, Held: a.UtilizationMin >= MinUtilization}
	if use.Exercised {
		use.Figure = "lowest " + pct1(a.UtilizationMin)
		if !use.Held {
			use.Alone = pct1(a.AlgoUtilizationMin)
			use.Cause, use.Why = utilizationCause(s)
		}
	} else {
		use.Figure = "no key offered ≥ 2·L"
	}
	checks := []Check{over, deny, use}
	if s.Settings.Operation {
		n := s.Cost.Errors
		errs := Check{Promise: PromiseNoErrors, Exercised: true, Held: n == 0}
		errs.Figure = count(n) + " errors"
		if n > 0 {
			errs.Cause, errs.Why = FleetFault, "the fleet's fault: sluice answers every check with a decision, not an error, through a reload, a deploy, moving traffic or a store that lost its state"
		}
		checks = append(checks, errs)
	}
	if busy := s.Machine.Busy(); busy != "" {
		for i := range checks {
			if checks[i].Cause == FleetFault {
				checks[i].Why += "; the machine was busy meanwhile (" + busy + "), which delays the instances' syncs with Redis"
			}
		}
	}
	return checks
}

// algorithm names the scenario's algorithm (after "the"), "rule's
// algorithm" if the settings do not say.
func algorithm(s *Scenario) string {
	if s.Settings.Algorithm == "" {
		return "rule's algorithm"
	}
	return s.Settings.Algorithm
}

// sliding reports whether the scenario's rule is a sliding window, whose
// documented limits (a sub-window counted whole until all of it has left
// the window) the verdict names.
func sliding(s *Scenario) bool { return s.Settings.Algorithm == "sliding" }

// denialCause says whose false denials are: the algorithm's when, run
// centrally on the same checks, it denies at least as many quiet keys, or
// (a sliding window) when every denied key was offered above 0.9·L in W
// plus one sub-window, which a sliding window counts; else the fleet's.
func denialCause(s *Scenario) (Cause, string) {
	a := &s.Accuracy
	alg := algorithm(s)
	switch {
	case a.AlgoFalseDenialKeys >= a.FalseDenialKeys:
		why := fmt.Sprintf("the algorithm's documented limit, not the fleet's: the %s run centrally on the same checks denies %d of the %d quiet keys too", alg, a.AlgoFalseDenialKeys, a.QuietKeys)
		if sliding(s) {
			why += " (it counts a sub-window whole until all of it has left the window)"
		}
		return AlgorithmLimit, why
	case sliding(s) && a.SpanQuietKeys > 0 && a.SpanFalseDenialKeys == 0:
		return AlgorithmLimit, fmt.Sprintf("the algorithm's documented limit, not the fleet's: each denied key was offered above 0.9·L in W plus one sub-window, "+
			"which a sliding window counts (a sub-window whole until all of it has left the window); of the %d keys never offered that, none was denied", a.SpanQuietKeys)
	}
	return FleetFault, fmt.Sprintf("the fleet's fault: it denied %d quiet keys, the %s run centrally on the same checks %d", a.FalseDenialKeys, alg, a.AlgoFalseDenialKeys)
}

// utilizationCause says whose a lowest utilization below MinUtilization
// is: the algorithm's when, run centrally on the same checks, its own
// lowest is below the promise too and the fleet's is within OwnLoss of it;
// else the fleet's, by the points between.
func utilizationCause(s *Scenario) (Cause, string) {
	a := &s.Accuracy
	alg := algorithm(s)
	if a.AlgoUtilizationMin < MinUtilization && a.UtilizationMin >= a.AlgoUtilizationMin-OwnLoss {
		why := fmt.Sprintf("the algorithm's documented limit, not the fleet's: the %s run centrally on the same checks gets %s at its lowest, the fleet %s",
			alg, pct1(a.AlgoUtilizationMin), pct1(a.UtilizationMin))
		if sliding(s) {
			why += " (a sliding window frees a sub-window only once all of it has left the window; an exact log frees each request as it leaves)"
		}
		return AlgorithmLimit, why
	}
	central := min(a.AlgoUtilizationMin, MinUtilization)
	return FleetFault, fmt.Sprintf("the fleet's fault: %.1f points below %s (the %s run centrally on the same checks gets %s at its lowest)",
		100*(central-a.UtilizationMin), pct1(central), alg, pct1(a.AlgoUtilizationMin))
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
	"whose a ✗ is, under the table: the fleet's (a broken promise: it did worse than the algorithm run centrally on the same " +
		"checks), the algorithm's documented limit (run centrally on the same checks it falls as short: not a broken promise), " +
		"or, for p99.9, the machine's (busy: load average or CPU steal, or bare local limiters slow too) or Redis waits.",
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

// LatencyCause says whose a p99.9 of the checks of keys within their
// limit above LatencyTarget is (NoCause if it met the target or there were
// no such checks), in words: the machine's when it was busy (Machine.Busy)
// or bare local limiters checked in the same run, with no store, were slow
// too (peers: their slowest p99.9, 0 if none ran); else Redis waits when
// most slow checks ran during a round trip of their instance to Redis;
// else the machine's, the checks having waited for a CPU.
func LatencyCause(s *Scenario, peers time.Duration) (Cause, string) {
	if met, any := LatencyMet(s); met || !any {
		return NoCause, ""
	}
	l := &s.Waits.Latency
	var busy []string
	if b := s.Machine.Busy(); b != "" {
		busy = append(busy, "it was busy: "+b)
	}
	if peers > LatencyTarget {
		busy = append(busy, fmt.Sprintf("bare local limiters, with no store, checked in the same run were slow too (p99.9 %v)", peers))
	}
	switch {
	case len(busy) > 0:
		return MachineLimit, "the machine's: " + strings.Join(busy, "; ")
	case l.Within.Slow > 0 && 2*l.SlowTripWithin > l.Within.Slow:
		return StoreWaits, fmt.Sprintf("Redis waits: %d of the %d slow checks ran while their instance waited for Redis (keys at their divergence cap), "+
			"which the fleet's bound costs: not a promise (sluice bounds how long a check waits, Options.Timeout)", l.SlowTripWithin, l.Within.Slow)
	}
	return MachineLimit, "the machine's: the slow checks waited for a CPU, not for Redis"
}

// slowestPeer is the largest p99.9 of the bare local limiters checked in
// the run, 0 if none ran.
func slowestPeer(ss []Scenario) time.Duration {
	var p time.Duration
	for i := range ss {
		for _, peer := range ss[i].Peers {
			p = max(p, peer.Latency.P999)
		}
	}
	return p
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
func whyText(y sluice.SyncWaits) string {
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
	var broken, limits, whys []string
	judged, idle := 0, 0
	fast, timed := 0, 0
	slowBy := map[Cause]int{}
	peers := slowestPeer(ss)
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
			if c.Held {
				continue
			}
			figure := c.Figure
			if c.Alone != "" {
				figure += "; the algorithm alone, run centrally: " + c.Alone
			}
			line := fmt.Sprintf("%s: %s (%s)", label(s), c.Promise, figure)
			if c.Cause == AlgorithmLimit {
				limits = append(limits, line)
			} else {
				broken = append(broken, line)
			}
			if c.Why != "" {
				whys = append(whys, fmt.Sprintf("%s, %s ✗: %s.", label(s), c.Promise, c.Why))
			}
		}
		if ops && !s.Settings.Operation {
			row = append(row, "–") // not judged on this profile
		}
		l := &s.Waits.Latency
		cell := "–"
		cause, causeWhy := LatencyCause(s, peers)
		if met, any := LatencyMet(s); any {
			cell = dur(Dur(l.Within.P999))
			timed++
			if met {
				fast++
				cell += " ✓"
			} else {
				cell += " ✗"
				slowBy[cause]++
			}
		}
		rows = append(rows, append(row, cell))
		if why := Why(s); why != "" {
			if causeWhy != "" {
				why = causeWhy + "; " + why
			}
			whys = append(whys, fmt.Sprintf("%s, p99.9 %s: %s.", label(s), p999Text(l), why))
		}
	}
	summary := verdictSummary(broken, limits, judged, idle, len(ss))
	if timed > 0 {
		summary += fmt.Sprintf("; Allow p99.9 of the keys within their limit ≤ %v on %d of %s", LatencyTarget, fast, profiles(timed))
		var parts []string
		for _, c := range []Cause{MachineLimit, StoreWaits} {
			if n := slowBy[c]; n > 0 {
				parts = append(parts, fmt.Sprintf("%d ✗ %s", n, c))
			}
		}
		if len(parts) > 0 {
			summary += " (a target, not a promise: " + strings.Join(parts, ", ") + ")"
		}
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

// verdictSummary is the verdict's summary line but for latency: the
// promises broken by the fleet, or all held, and the ✗ that are the
// algorithms' documented limits, not counted as broken.
func verdictSummary(broken, limits []string, judged, idle, scenarios int) string {
	var summary string
	switch {
	case len(broken) == 1:
		summary = "1 promise broken by the fleet: " + broken[0]
	case len(broken) > 1:
		summary = fmt.Sprintf("%d promises broken by the fleet: %s", len(broken), strings.Join(broken, "; "))
	case judged == 0:
		return "nothing to judge: no key was offered above L, below 0.9·L or at 2·L"
	case len(limits) > 0:
		summary = fmt.Sprintf("all promises held by the fleet (%d judged over %s)", judged, profiles(scenarios))
	case idle > 0:
		summary = fmt.Sprintf("all promises held (%d judged over %s; %d had nothing to judge, marked –)", judged, profiles(scenarios), idle)
	default:
		summary = fmt.Sprintf("all promises held (%d judged over %s)", judged, profiles(scenarios))
	}
	switch {
	case len(limits) == 1:
		summary += "; 1 ✗ is the algorithm's documented limit, as the algorithm run centrally falls as short, not a broken promise: " + limits[0]
	case len(limits) > 1:
		summary += fmt.Sprintf("; %d ✗ are the algorithm's documented limits, as the algorithm run centrally falls as short, not broken promises: %s", len(limits), strings.Join(limits, "; "))
	}
	return summary
}

// profiles says "1 profile", "8 profiles".
func profiles(n int) string {
	if n == 1 {
		return "1 profile"
	}
	return fmt.Sprintf("%d profiles", n)
}
