package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/lat"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/oracle"
)

// scenario returns a scenario of profile name with plausible figures of a
// default run, the widest ones where it matters.
func scenario(name, sweep string) Scenario {
	return Scenario{
		Name: name,
		Settings: Settings{
			Profile: name, Sweep: sweep, Rule: "1000/1s sliding B=10", Limit: 1000, Window: time.Second,
			ErrorBudget: 0.01, Instances: 16, Workers: 16, SyncInterval: 100 * time.Millisecond,
		},
		Accuracy: oracle.Summary{
			Checks: 12345678, Admitted: 1234567, LimitedKeys: 1000, OverMax: 0.1234, OverP99: 0.1, AlgoOverMax: 0.1134,
			AlgoOverP99: 0.09, ExcessMax: -0.0123, ExcessP99: 0.005, EstimateOverMax: 0.0123, HotKeys: 1000,
			Utilization: 1.0243, UtilizationMin: 0.8999, QuietKeys: 100000, FalseDenialKeys: 99999, FalseDenials: 123456,
			WrongRate: 0.1234, AlgoWrongRate: 0.1111, DisagreeRate: 0.0123,
		},
		Cost: Cost{
			Checks: 12345678, ChecksPerSec: 1234567, PerInstance: []float64{1234, 123456},
			LatencyP50: Dur(999 * time.Microsecond), LatencyP99: Dur(999 * time.Millisecond), LatencyP999: Dur(999 * time.Millisecond),
			CommandsPerSec: 123456, RoundTripsPerSec: 123456, UrgentPerSec: 12345, UrgentPerWindow: 1234567,
			CycleP50: Dur(999 * time.Millisecond), CycleMax: Dur(12 * time.Second), NHatMin: 128, NHatMax: 256,
			ClockSpread: Dur(999 * time.Millisecond),
		},
		Notes: []string{"the workers fell up to 776ms behind the schedule: the machine could not offer the asked rate; " +
			strings.Repeat("a long note goes on and on, ", 8)},
		Waits: Waits{Read: true, Checks: 12345678, Local: 12345678 - 3456789, Urgent: 2345678, Untracked: 12345, Fallback: 1111111,
			UrgentCycles: 1234567, Reservations: 2345678, EarlySyncs: 1234567, Every: 64,
			Latency: oracle.Latency{Checks: 12345678, OverChecks: 1234567,
				All:          lat.Quantiles{N: 192901, P50: 999 * time.Microsecond, P99: 999 * time.Millisecond, P999: 999 * time.Millisecond, Slow: 99999},
				Over:         lat.Quantiles{N: 19290, P999: 999 * time.Millisecond, Slow: 99999},
				Within:       lat.Quantiles{N: 173611, P999: 999 * time.Millisecond, Slow: 99999},
				SlowTripOver: 12345, SlowTripWithin: 12345}},
		Peers: []Peer{{Name: "x/time/rate", Duration: Dur(time.Second), Checks: 12345678, ChecksPerSec: 12345678,
			Latency: lat.Quantiles{N: 192901, P50: 999 * time.Microsecond, P99: 999 * time.Millisecond, P999: 999 * time.Millisecond}, Every: 64}},
	}
}

// run returns a report of the default profiles, or of a sweep's points.
func testRun(sweep bool) *Run {
	r := &Run{Store: "embedded miniredis stand-in (not a real Redis) at 127.0.0.1:44655", LocalBytesPerKey: 167,
		Notes: []string{"store: embedded miniredis, a stand-in for Redis (single-threaded Go, Lua via gopher-lua): accuracy figures are real"}}
	for _, p := range []string{"steady", "bursty", "sync-burst", "boundary", "zipf", "churn", "ramp", "join-leave"} {
		if !sweep {
			r.Scenarios = append(r.Scenarios, scenario(p, ""))
			continue
		}
		for _, v := range []string{"instances=2", "instances=128"} {
			s := scenario(p, v)
			r.Scenarios = append(r.Scenarios, s)
		}
	}
	return r
}

// TestTextFits: the default text report fits Width columns, tables,
// legends, notes and verdict alike; -wide and Markdown keep every column.
func TestTextFits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		st    Style
		sweep bool
		fits  bool
		heads []string // must appear (wide columns)
	}{
		{name: "default", fits: true},
		{name: "default sweep", sweep: true, fits: true},
		{name: "wide", st: Style{Wide: true}, heads: []string{"fleet in own estimate (≤ ε)", "fleet≠central", "clock spread", "per instance"}},
		{name: "markdown", st: Style{Markdown: true}, heads: []string{"| fleet in own estimate (≤ ε) |", "fleet≠central", "| clock spread |"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			Text(&b, c.st, testRun(c.sweep))
			out := b.String()
			widest := 0
			for _, l := range strings.Split(out, "\n") {
				n := utf8.RuneCountInString(l)
				widest = max(widest, n)
				if c.fits {
					assert.LessOrEqual(t, n, Width, "line too wide: %q", l)
				}
			}
			if !c.fits {
				assert.Greater(t, widest, Width, "the wide tables are not wide")
			}
			for _, h := range c.heads {
				assert.Contains(t, out, h)
			}
			if c.fits {
				assert.NotContains(t, out, "fleet≠central", "a wide-only column in the default table")
			}
		})
	}
}

// TestLegends: each figure that may alarm is explained under its table.
func TestLegends(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	Text(&b, Style{}, testRun(false))
	out := b.String()
	for _, want := range []string{
		"wrong decisions: unlike an exact central sliding log replaying the merged stream",
		"not fleet errors",
		"algorithm alone: the same checks decided centrally by the same algorithm: its own approximation, not the fleet's.",
		"fleet excess:",
		"false denials:",
		"utilization:",
		"Allow p50, p99, p99.9:",
		"waited for Redis:",
		"x/time/rate:",
		"sluice Local:",
		"N̂:",
	} {
		assert.Contains(t, out, want)
	}
}

func TestVerdict(t *testing.T) {
	t.Parallel()
	base := scenario("steady", "")
	base.Accuracy = oracle.Summary{LimitedKeys: 2, OverMax: 0.059, AlgoOverMax: 0.054, ExcessMax: 0.006,
		QuietKeys: 18, HotKeys: 2, Utilization: 1.02, UtilizationMin: 1.01}
	for _, c := range []struct {
		name string
		edit func(a *oracle.Summary)
		// marks of over-admission, false denials, utilization
		want [3]string
		fig  [3]string
	}{
		{"all held", func(*oracle.Summary) {}, [3]string{"✓", "✓", "✓"},
			[3]string{"+0.600% (algorithm's own +5.40%)", "0 of 18 denied", "lowest 101.0%"}},
		// The algorithm's own 5.4 % is not the fleet's: it is not judged;
		// the fleet's part just over ε is.
		{"fleet over ε", func(a *oracle.Summary) { a.ExcessMax = 0.0101 }, [3]string{"✗", "✓", "✓"},
			[3]string{"+1.01% (algorithm's own +5.40%)", "", ""}},
		{"fleet at ε", func(a *oracle.Summary) { a.ExcessMax = 0.01 }, [3]string{"✓", "✓", "✓"}, [3]string{}},
		{"fleet below the algorithm", func(a *oracle.Summary) { a.ExcessMax = -0.002 }, [3]string{"✓", "✓", "✓"},
			[3]string{"−0.200% (algorithm's own +5.40%)", "", ""}},
		{"false denials", func(a *oracle.Summary) { a.FalseDenialKeys, a.FalseDenials = 2, 7 }, [3]string{"✓", "✗", "✓"},
			[3]string{"", "2 of 18 denied", ""}},
		{"low utilization", func(a *oracle.Summary) { a.UtilizationMin = 0.89 }, [3]string{"✓", "✓", "✗"},
			[3]string{"", "", "lowest 89.0%"}},
		{"utilization at 90 %", func(a *oracle.Summary) { a.UtilizationMin = 0.9 }, [3]string{"✓", "✓", "✓"}, [3]string{}},
		{"nothing to judge", func(a *oracle.Summary) { *a = oracle.Summary{} }, [3]string{"–", "–", "–"},
			[3]string{"no key offered above L", "no key offered ≤ 0.9·L", "no key offered ≥ 2·L"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := base
			c.edit(&s.Accuracy)
			checks := Verdict(&s)
			require.Len(t, checks, 3)
			for i, ch := range checks {
				assert.Equal(t, c.want[i], ch.Mark(), "%s: %+v", ch.Promise, ch)
				if c.fig[i] != "" {
					assert.Equal(t, c.fig[i], ch.Figure, ch.Promise)
				}
			}
		})
	}
}

func TestVerdictText(t *testing.T) {
	t.Parallel()
	held := scenario("steady", "")
	held.Accuracy = oracle.Summary{LimitedKeys: 2, ExcessMax: 0.006, AlgoOverMax: 0.054, QuietKeys: 18, HotKeys: 2, UtilizationMin: 1}
	held.Waits.Latency = oracle.Latency{Within: lat.Quantiles{N: 100, P999: 21400 * time.Microsecond}}
	denied := held
	denied.Name, denied.Settings.Profile = "join-leave", "join-leave"
	denied.Accuracy.FalseDenialKeys = 2
	over := held
	over.Name, over.Settings.Profile = "sync-burst", "sync-burst"
	over.Accuracy.ExcessMax = 0.0108
	idle := held
	idle.Name, idle.Settings.Profile = "churn", "churn"
	idle.Accuracy = oracle.Summary{QuietKeys: 59}
	low := held
	low.Name, low.Settings.Profile = "boundary", "boundary"
	low.Accuracy.UtilizationMin, low.Accuracy.AlgoUtilizationMin = 0.766, 0.761
	lower := low
	lower.Accuracy.UtilizationMin = 0.70
	for _, c := range []struct {
		name string
		ss   []Scenario
		last string
	}{
		{"held", []Scenario{held}, "Verdict: all promises held (3 judged over 1 profile); Allow p99.9 of the keys within their limit ≤ 50µs on 0 of 1 profile (a target, not a promise: 1 ✗ the machine's)."},
		{"held, one idle", []Scenario{held, idle}, "Verdict: all promises held (4 judged over 2 profiles; 2 had nothing to judge, marked –); Allow p99.9"},
		{"one broken", []Scenario{held, denied}, "Verdict: 1 promise broken by the fleet: join-leave: no false denials (2 of 18 denied); Allow p99.9"},
		{"two broken", []Scenario{over, denied}, "Verdict: 2 promises broken by the fleet: sync-burst: fleet's over-admission ≤ ε (+1.08% (algorithm's own"},
		{"utilization, the algorithm's own", []Scenario{low}, "Verdict: all promises held by the fleet (3 judged over 1 profile); 1 ✗ is the algorithm's documented limit, " +
			"as the algorithm run centrally falls as short, not a broken promise: boundary: utilization ≥ 90 % (lowest 76.6%; the algorithm alone, run centrally: 76.1%); Allow p99.9"},
		{"utilization, the fleet's", []Scenario{lower}, "Verdict: 1 promise broken by the fleet: boundary: utilization ≥ 90 % (lowest 70.0%; the algorithm alone, run centrally: 76.1%); Allow p99.9"},
		{"one broken, one the algorithm's", []Scenario{denied, low}, "Verdict: 1 promise broken by the fleet: join-leave: no false denials (2 of 18 denied); 1 ✗ is the algorithm's documented limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			VerdictText(&b, Style{}, c.ss)
			out := strings.TrimRight(b.String(), "\n")
			lines := strings.Split(out, "\n")
			// The summary is the last line (wrapped: the last paragraph).
			i := len(lines) - 1
			for i > 0 && strings.HasPrefix(lines[i], "  ") {
				i--
			}
			summary := strings.Join(strings.Fields(strings.Join(lines[i:], " ")), " ")
			assert.True(t, strings.HasPrefix(summary, c.last), "summary %q, want %q", summary, c.last)
			for _, s := range c.ss {
				assert.Contains(t, out, "\n"+label(&s)+" ", "no verdict line for %s", label(&s))
			}
			assert.Contains(t, out, "21.4ms ✗")
			assert.Contains(t, summary, "Allow p99.9 of the keys within their limit ≤ 50µs on 0 of ")
		})
	}
}

// TestWhy: a p99.9 above the target is explained from the slow checks that
// ran during a round trip of their instance to Redis and those that did
// not, and what Redis decided; nothing when both p99.9 meet it.
func TestWhy(t *testing.T) {
	t.Parallel()
	slow, fast := 200*time.Microsecond, 2*time.Microsecond
	for _, c := range []struct {
		name       string
		all, in    time.Duration
		tripsIn    int // of 10 slow checks of keys ≤ L
		tripsOver  int // of 10 slow checks of keys > L
		urgent     int64
		every      int
		want, not_ string
	}{
		{"fast", fast, fast, 0, 0, 0, 1, "", ""},
		{"over-L keys waited for Redis", slow, fast, 0, 10, 7, 1,
			"keys > L: Redis: 10 slow (≥ 50µs), all during a round trip of their instance to Redis; Redis decided 7 checks in all (7 urgent", "keys ≤ L"},
		{"over-L keys waited for a CPU", slow, fast, 0, 0, 0, 64,
			"keys > L: CPU: 10 slow (≥ 50µs) of the 1 in 64 checks timed, none during a round trip", "Redis: "},
		{"within-L keys, CPU", slow, slow, 0, 10, 7, 1, "keys ≤ L: CPU: 10 slow (≥ 50µs), none during a round trip", "keys > L"},
		{"within-L keys, both", slow, slow, 4, 10, 7, 1,
			"keys ≤ L: 10 slow (≥ 50µs): 4 during a round trip of their instance to Redis, 6 with none (CPU); Redis decided 7", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := scenario("steady", "")
			s.Waits = Waits{Read: true, Urgent: c.urgent, UrgentCycles: c.urgent, Every: c.every, Latency: oracle.Latency{
				All:          lat.Quantiles{N: 1000, P999: c.all, Slow: 20},
				Over:         lat.Quantiles{N: 500, P999: c.all, Slow: 10},
				Within:       lat.Quantiles{N: 500, P999: c.in, Slow: 10},
				SlowTripOver: c.tripsOver, SlowTripWithin: c.tripsIn,
			}}
			why := Why(&s)
			if c.want == "" {
				assert.Empty(t, why)
				return
			}
			assert.Contains(t, why, c.want)
			if c.not_ != "" {
				assert.NotContains(t, why, c.not_)
			}
			met, any := LatencyMet(&s)
			assert.True(t, any)
			assert.Equal(t, c.in <= LatencyTarget, met)
		})
	}
}

// TestWhyReasons: the urgent checks are split by why their key had no local
// allowance left, leaving out reasons never counted; the near-limit count
// of the slow checks within L is given with the p99.9 below 0.9·L, and the
// bare local limiters' p99.9 where they ran.
func TestWhyReasons(t *testing.T) {
	t.Parallel()
	s := scenario("bursty", "")
	s.Waits = Waits{Read: true, Urgent: 9, UrgentCycles: 5, Every: 1,
		Why: sluice.SyncWaits{Near: 2, Start: 3, Cap: 4},
		Latency: oracle.Latency{
			All:      lat.Quantiles{N: 1000, P999: time.Millisecond, Slow: 20},
			Within:   lat.Quantiles{N: 500, P999: time.Millisecond, Slow: 10},
			Below:    lat.Quantiles{N: 400, P999: 20 * time.Microsecond, Slow: 1},
			SlowNear: 9, SlowTripWithin: 10,
		}}
	why := Why(&s)
	assert.Contains(t, why, "9 urgent: keys at their cap (2 near the limit (no lease from its last tenth); 3 a sub-window's start (the last one's lease ended); 4 no lease, the cap used up), in 5 round trips")
	assert.NotContains(t, why, "never synced")
	assert.Contains(t, why, "9 of the slow ones while their key was offered above 0.9·L")
	assert.Contains(t, why, "p99.9 20.0µs over the checks of keys offered at most 0.9·L")
	assert.Contains(t, why, "; p99.9 of bare local limiters on the same schedule: x/time/rate 999.0ms")
	s.Peers = nil
	assert.NotContains(t, Why(&s), "bare local limiters", "no peers ran")
}

// TestPeersTable: sluice's row, then each peer's, for the scenarios that
// have peers only.
func TestPeersTable(t *testing.T) {
	t.Parallel()
	with := scenario("throughput", "")
	without := scenario("zipf", "")
	without.Peers = nil
	var b bytes.Buffer
	PeersTable(&b, Style{}, []Scenario{without, with})
	out := b.String()
	assert.Contains(t, out, "sluice (fleet, Redis)")
	assert.Contains(t, out, "x/time/rate")
	assert.Contains(t, out, "1 in 64")
	assert.NotContains(t, out, "zipf")
	b.Reset()
	PeersTable(&b, Style{}, []Scenario{without})
	assert.Empty(t, b.String(), "a table without peers")
}

// TestTextEndsWithVerdict: the verdict comes after the tables and the
// notes, and the summary is the very last line.
func TestTextEndsWithVerdict(t *testing.T) {
	t.Parallel()
	for _, st := range []Style{{}, {Wide: true}, {Markdown: true}} {
		var b bytes.Buffer
		Text(&b, st, testRun(false))
		out := b.String()
		v := strings.LastIndex(out, "Verdict: what sluice promises")
		require.Positive(t, v, "%+v: no verdict", st)
		assert.Less(t, strings.LastIndex(out, "note: "), v, "%+v: a note after the verdict", st)
		assert.Less(t, strings.LastIndex(out, "took "), v, "%+v: took after the verdict", st)
		// The last paragraph (a wrapped line goes on indented).
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		i := len(lines) - 1
		for i > 0 && strings.HasPrefix(lines[i], "  ") {
			i--
		}
		assert.Contains(t, lines[i], "Verdict: ", "%+v: last paragraph %q", st, lines[i:])
		assert.Contains(t, lines[i], "promise", "%+v: last paragraph %q", st, lines[i:])
	}
}

// TestJSONUnchanged: the JSON report keeps its fields.
func TestJSONUnchanged(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, testRun(false), false))
	var m map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &m))
	for _, k := range []string{"command", "store", "scenarios", "local_bytes_per_key", "took"} {
		assert.Contains(t, m, k)
	}
	sc := m["scenarios"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "settings", "accuracy", "cost", "notes"} {
		assert.Contains(t, sc, k)
	}
}

// TestVerdictOperations: an operations profile is also judged on its check
// errors, in a column of its own that the other profiles' rows leave
// unjudged; without one, the table has no such column.
func TestVerdictOperations(t *testing.T) {
	t.Parallel()
	steady := scenario("steady", "")
	steady.Accuracy = oracle.Summary{LimitedKeys: 2, ExcessMax: 0.006, QuietKeys: 18, HotKeys: 2, UtilizationMin: 1}
	reload := steady
	reload.Name, reload.Settings.Profile, reload.Settings.Operation = "reload", "reload", true
	failed := reload
	failed.Cost.Errors = 86

	require.Len(t, Verdict(&steady), 3)
	checks := Verdict(&reload)
	require.Len(t, checks, 4)
	assert.Equal(t, PromiseNoErrors, checks[3].Promise)
	assert.Equal(t, "✓", checks[3].Mark())
	assert.Equal(t, "0 errors", checks[3].Figure)
	checks = Verdict(&failed)
	assert.Equal(t, "✗", checks[3].Mark())
	assert.Equal(t, "86 errors", checks[3].Figure)

	var b bytes.Buffer
	VerdictText(&b, Style{}, []Scenario{steady, failed})
	out := b.String()
	assert.Contains(t, out, PromiseNoErrors)
	assert.Contains(t, out, "1 promise broken by the fleet: reload: no check errors (86 errors)")
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "steady ") {
			assert.Contains(t, l, " – ", "steady's row leaves the errors unjudged")
		}
		if strings.HasPrefix(l, "reload ") {
			assert.Contains(t, l, "✗ 86 errors")
		}
	}
	b.Reset()
	VerdictText(&b, Style{}, []Scenario{steady})
	assert.NotContains(t, b.String(), PromiseNoErrors)
}
