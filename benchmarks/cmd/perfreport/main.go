// Command perfreport turns the output of benchmarks/run.sh into
// docs/performance.md: the side-by-side tables, the ratios to the floor and
// to each peer (all from the same run), the project's targets with a verdict,
// the machine and versions, and how to reproduce. With -sync-o, what syncing
// costs Redis goes to a page of its own (docs/performance-sync.md), which
// the report links to.
//
// Usage:
//
//	perfreport -results results.txt -meta meta.txt [-benchstat bs.txt [-benchstat-o benchstat.md]] [-dist dist.txt] -o ../docs/performance.md [-sync-o ../docs/performance-sync.md]
//
// results.txt is raw `go test -bench` output (several runs concatenated);
// meta.txt holds "key: value" lines written by run.sh.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

func main() {
	results := flag.String("results", "", "raw benchmark output (required)")
	meta := flag.String("meta", "", "key: value metadata lines")
	bs := flag.String("benchstat", "", "benchstat output to append")
	dist := flag.String("dist", "", "go test -v -run TestDistributions output")
	out := flag.String("o", "", "output file (default stdout)")
	bsOut := flag.String("benchstat-o", "", "with -o and -benchstat: write benchstat's output to this file, which the report links to, instead of including it")
	syncOut := flag.String("sync-o", "", "with -o: write the sync tables (what syncing costs Redis) to this file, which the report links to, instead of including them")
	detailOut := flag.String("detail-o", "", "with -o: write the per-key check tables, the ratios, the algorithms, the telemetry cost and the setup to this file, which the report links to, instead of including them")
	flag.Parse()
	if *results == "" {
		fmt.Fprintln(os.Stderr, "perfreport: -results is required")
		os.Exit(2)
	}
	f, err := os.Open(*results)
	if err != nil {
		fail(err)
	}
	data, err := Parse(f, *results)
	f.Close()
	if err != nil {
		fail(err)
	}
	r := &Report{Data: data, Meta: map[string]string{}}
	if *meta != "" {
		r.Meta, r.MetaOrder = readMeta(*meta)
	}
	if *bs != "" {
		b, err := os.ReadFile(*bs)
		if err != nil {
			fail(err)
		}
		r.Benchstat = string(b)
	}
	if *dist != "" {
		b, err := os.ReadFile(*dist)
		if err != nil {
			fail(err)
		}
		r.Dist = distLines(string(b))
	}
	if *out != "" && *bsOut != "" && r.Benchstat != "" {
		// benchstat's output is most of the bytes: it gets a page of its
		// own, and each page links to the other.
		r.BenchstatPage = relLink(*out, *bsOut)
		r.ReportPage = relLink(*bsOut, *out)
	}
	if *out != "" && *syncOut != "" {
		r.SyncPage = relLink(*out, *syncOut)
		r.SyncBack = relLink(*syncOut, *out)
	}
	if *out != "" && *detailOut != "" {
		r.DetailPage = relLink(*out, *detailOut)
		r.DetailBack = relLink(*detailOut, *out)
	}
	var buf bytes.Buffer
	r.Write(&buf)
	if *out == "" {
		os.Stdout.Write(buf.Bytes())
		return
	}
	if r.BenchstatPage != "" {
		var bs bytes.Buffer
		r.WriteBenchstat(&bs)
		if err := os.WriteFile(*bsOut, bs.Bytes(), 0o644); err != nil {
			fail(err)
		}
	}
	if r.SyncPage != "" {
		var sp bytes.Buffer
		r.WriteSync(&sp)
		if err := os.WriteFile(*syncOut, sp.Bytes(), 0o644); err != nil {
			fail(err)
		}
	}
	if r.DetailPage != "" {
		var dp bytes.Buffer
		r.WriteDetail(&dp)
		if err := os.WriteFile(*detailOut, dp.Bytes(), 0o644); err != nil {
			fail(err)
		}
	}
	// What follows the generated block on the page as it is (a section
	// another script keeps, such as benchmarks/keymap.sh's) stays.
	old, err := os.ReadFile(*out)
	if err != nil && !os.IsNotExist(err) {
		fail(err)
	}
	if err := os.WriteFile(*out, withTail(buf.Bytes(), old), 0o644); err != nil {
		fail(err)
	}
}

// withTail returns page, a generated report that ends with generatedEnd,
// followed by what follows that marker in old, the page it replaces.
func withTail(page, old []byte) []byte {
	_, tail, ok := bytes.Cut(old, []byte("\n"+generatedEnd+"\n"))
	if !ok || len(bytes.TrimSpace(tail)) == 0 {
		return page
	}
	return append(append(page[:len(page):len(page)], '\n'), bytes.TrimLeft(tail, "\n")...)
}

// relLink is the relative link from the file from to the file to.
func relLink(from, to string) string {
	rel, err := filepath.Rel(filepath.Dir(absPath(from)), absPath(to))
	if err != nil {
		fail(err)
	}
	return filepath.ToSlash(rel)
}

func absPath(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		fail(err)
	}
	return a
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "perfreport:", err)
	os.Exit(1)
}

// Data holds every measured value: Data[name][unit] = values, where name is
// the benchmark name without "Benchmark" and the GOMAXPROCS suffix, e.g.
// "Check/set=hot/path=allow/lib=floor/mode=serial", and units are tidied
// (ns/op is sec/op in seconds).
type Data map[string]map[string][]float64

// Parse reads raw benchmark output.
func Parse(r io.Reader, name string) (Data, error) {
	d := Data{}
	br := benchfmt.NewReader(r, name)
	for br.Scan() {
		res, ok := br.Result().(*benchfmt.Result)
		if !ok {
			continue // syntax errors are log lines: ignore
		}
		n := strings.TrimPrefix(res.Name.String(), "Benchmark")
		if i := strings.LastIndexByte(n, '-'); i >= 0 && isDigits(n[i+1:]) {
			n = n[:i]
		}
		if d[n] == nil {
			d[n] = map[string][]float64{}
		}
		for _, v := range res.Values {
			d[n][v.Unit] = append(d[n][v.Unit], v.Value)
		}
	}
	return d, br.Err()
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Stat is a median with its 95% confidence interval (as benchstat computes
// it), and the number of samples.
type Stat struct {
	Median, Lo, Hi float64
	N              int
	OK             bool
}

// Get returns the summary of name's unit.
func (d Data) Get(name, unit string) Stat {
	vs := d[name][unit]
	if len(vs) == 0 {
		return Stat{}
	}
	cp := append([]float64(nil), vs...)
	s := benchmath.AssumeNothing.Summary(benchmath.NewSample(cp, &benchmath.DefaultThresholds), 0.95)
	return Stat{Median: s.Center, Lo: s.Lo, Hi: s.Hi, N: len(vs), OK: true}
}

// CI returns the half-width of the confidence interval in percent of the
// median, or -1 when there are too few samples for one.
func (s Stat) CI() float64 {
	if !s.OK || math.IsInf(s.Lo, 0) || math.IsInf(s.Hi, 0) || s.Median == 0 {
		return -1
	}
	return 100 * math.Max(s.Hi/s.Median-1, 1-s.Lo/s.Median)
}

// Report is everything the document is made of.
type Report struct {
	Data      Data
	Meta      map[string]string
	MetaOrder []string
	Benchstat string
	// BenchstatPage, if set, is the link from the report to the page that
	// holds benchstat's output, written by WriteBenchstat; the report links
	// to it instead of including the output. ReportPage is the link back.
	BenchstatPage string
	ReportPage    string
	// SyncPage, if set, is the link from the report to the page that holds
	// the sync tables (what syncing costs Redis), written by WriteSync; the
	// report links to it instead of including them. SyncBack is the link
	// back.
	SyncPage string
	SyncBack string
	// DetailPage, if set, is the link from the report to the page that
	// holds the per-key check tables, the ratios, the algorithms, the
	// telemetry cost and the setup, written by WriteDetail; the report
	// keeps the targets, the many-keys table, memory and the machine, and
	// links to it. DetailBack is the link back.
	DetailPage string
	DetailBack string
	Dist       []string
}

func readMeta(path string) (map[string]string, []string) {
	m := map[string]string{}
	var order []string
	f, err := os.Open(path)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if _, dup := m[k]; !dup {
			order = append(order, k)
		}
		m[k] = v
	}
	return m, order
}

func distLines(s string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if _, rest, ok := strings.Cut(line, "dist_test.go:"); ok {
			if _, msg, ok := strings.Cut(rest, ": "); ok {
				out = append(out, msg)
			}
		}
	}
	return out
}

// The layout of the per-key tables.
var (
	sets     = []string{"hot", "10k", "1M-zipf", "1M-zipf1.0", "churn"}
	setNames = map[string]string{"hot": "1 hot key", "10k": "10k keys, uniform", "1M-zipf": "1M keys, Zipf 1.1",
		"1M-zipf1.0": "1M keys, Zipf 1.0", "churn": "churn, 256Ki keys, 10k alive"}
	modes = []string{"serial", "parallel"}
	// lib, column title, benchmark (Check or CheckRemote)
	allowLibs = []libCol{
		{"floor", "floor", "Check"},
		{"floor-api", "floor behind the API", "Check"},
		{"sluice-eventual", "sluice eventual", "Check"},
		{"sluice-eventual-idle", "sluice eventual, idle syncer", "Check"},
		{"sluice-local", "sluice local", "Check"},
		{"sethvargo", "sethvargo memorystore", "Check"},
		{"xrate-xsync", "x/time/rate + xsync map", "Check"},
		{"ulule", "ulule memory", "Check"},
		{"sluice-strict", "sluice strict", "CheckRemote"},
		{"redis_rate", "redis_rate", "CheckRemote"},
	}
	localPeers = []string{"sethvargo", "xrate-xsync", "ulule"}
)

type libCol struct{ lib, title, bench string }

func checkName(bench, set, path, lib, mode string) string {
	return fmt.Sprintf("%s/set=%s/path=%s/lib=%s/mode=%s", bench, set, path, lib, mode)
}

func (r *Report) ns(bench, set, path, lib, mode string) Stat {
	s := r.Data.Get(checkName(bench, set, path, lib, mode), "sec/op")
	s.Median *= 1e9
	s.Lo *= 1e9
	s.Hi *= 1e9
	return s
}

func (r *Report) libBench(lib string) string {
	for _, c := range allowLibs {
		if c.lib == lib {
			return c.bench
		}
	}
	return "Check"
}

func (r *Report) nsOf(set, path, lib, mode string) Stat {
	return r.ns(r.libBench(lib), set, path, lib, mode)
}

func fmtNs(s Stat) string {
	if !s.OK {
		return "—"
	}
	v := fmtDur(s.Median)
	if ci := s.CI(); ci >= 0 {
		v += fmt.Sprintf(" ±%.0f%%", ci)
	}
	return v
}

func fmtDur(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.3g s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.3g ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.3g µs", ns/1e3)
	case ns >= 100:
		return fmt.Sprintf("%.0f ns", ns)
	}
	return fmt.Sprintf("%.1f ns", ns)
}

func ratio(a, b Stat) (float64, bool) {
	if !a.OK || !b.OK || b.Median == 0 {
		return 0, false
	}
	return a.Median / b.Median, true
}

func fmtRatio(x float64, ok bool) string {
	if !ok {
		return "—"
	}
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f×", x)
	case x >= 10:
		return fmt.Sprintf("%.1f×", x)
	}
	return fmt.Sprintf("%.2f×", x)
}

// fastestPeer returns the fastest local peer's time on a row, and its name.
func (r *Report) fastestPeer(set, path, mode string) (Stat, string) {
	var best Stat
	name := ""
	for _, p := range localPeers {
		s := r.nsOf(set, path, p, mode)
		if s.OK && (!best.OK || s.Median < best.Median) {
			best, name = s, p
		}
	}
	return best, name
}

// Write renders the document.
func (r *Report) Write(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	m := r.Meta
	p("# sluice performance\n\n%s\n\n", generatedBegin)
	defer p("\n%s\n", generatedEnd)
	sync := "below"
	if r.SyncPage != "" {
		sync = fmt.Sprintf("on its own page, [%s](%s)", path.Base(r.SyncPage), r.SyncPage)
	}
	tables := "The tables measure it on one hot key, on 10k keys and on a million keys, serial and parallel, allowed and denied."
	if r.DetailPage != "" {
		tables = fmt.Sprintf("The targets and the many-keys table sum it up; [%s](%s) has the per-key tables (one hot key, 10k keys, a million keys; serial and parallel; allowed and denied), the ratios, every algorithm, the telemetry cost and the setup.", path.Base(r.DetailPage), r.DetailPage)
	}
	p("## In one minute\n\n"+
		"- How fast is a check, beside the floor (the least a check can cost) and the other Go limiters? **Targets** answers first: each target, what this run measured, and whether it was met.\n"+
		"- A check in the default configuration decides locally: a map load and a compare-and-swap, with no allocation. %s\n"+
		"- What syncing costs Redis is %s. Every number comes from one run of `benchmarks/run.sh`, on the machine described at the end.\n\n", tables, sync)
	p("Generated by `benchmarks/run.sh%s` on %s. Every number below comes from that one run on one machine: sluice, the floor and the peers were measured side by side, and every ratio is computed from the same run. Re-run the script to refresh this page; do not edit it by hand.\n\n",
		ifs(m["mode"] == "quick", " -quick", ""), orDash(m["date"]))
	p("Cells are medians of %s runs with their 95%% confidence interval (as `benchstat` computes it; none is shown for fewer than 6 runs). Per-key checks are in ns per check (ns/op); parallel runs use `b.RunParallel` with GOMAXPROCS goroutines, %s for the checks that go to Redis, so their ns/op is wall time per check across all goroutines (checks/s = 10⁹ / ns).\n\n",
		orDash(m["count"]), orDash(m["remote_goroutines"])+" goroutines")
	if m["machine_note"] != "" {
		p("> **Machine state:** %s\n\n", m["machine_note"])
	}

	r.writeTargets(p)
	r.writeManyKeys(p)
	if r.DetailPage == "" {
		r.writeCheckTables(p)
		r.writeBeside(p)
		r.writeRatios(p)
		r.writeAlgorithms(p)
		r.writeTelemetry(p)
	} else {
		p("## The whole run\n\nThe per-key check tables (allow and deny paths), what runs beside the checks, the ratios to the floor and the peers, every algorithm's check, the telemetry cost and how each benchmark is set up, from the same run: [%s](%s).\n\n", path.Base(r.DetailPage), r.DetailPage)
	}
	if r.SyncPage != "" {
		p("## Sync against a real Redis\n\nWhat a sync cycle costs Redis and the instance, what each part of a key-sync costs Redis, and how many dirty keys one Redis keeps up with, measured in the same run: [%s](%s).\n\n", path.Base(r.SyncPage), r.SyncPage)
	} else {
		r.writeSync(p)
	}
	r.writeMemory(p)
	if r.DetailPage == "" {
		r.writeSetup(p)
	}
	r.writeEnv(p)
	switch {
	case r.Benchstat != "" && r.BenchstatPage != "":
		p("## Appendix: benchstat\n\nbenchstat's output of the same run, every benchmark with its confidence interval, is in [%s](%s).\n", path.Base(r.BenchstatPage), r.BenchstatPage)
	case r.Benchstat != "":
		p("## Appendix: benchstat\n\n<details><summary>benchstat output of the same run</summary>\n\n```\n%s\n```\n\n</details>\n", strings.TrimRight(r.Benchstat, "\n"))
	}
}

// WriteBenchstat renders the page of benchstat's output that the report
// links to (BenchstatPage).
func (r *Report) WriteBenchstat(w io.Writer) {
	report := r.ReportPage
	fmt.Fprintf(w, "# sluice performance: benchstat output\n\nGenerated by `benchmarks/run.sh` on %s with [%s](%s), from the same run; do not edit it by hand. Every benchmark of the run, with the median and 95%% confidence interval of each metric, as `go tool benchstat` prints them.\n\n```\n%s\n```\n",
		orDash(r.Meta["date"]), report, report, strings.TrimRight(r.Benchstat, "\n"))
}

// WriteSync renders the page of the sync tables that the report links to
// (SyncPage).
func (r *Report) WriteSync(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# sluice performance: sync against a real Redis\n\n%s\n\n", generatedBegin)
	defer p("\n%s\n", generatedEnd)
	p("## In one minute\n\n" +
		"- A sync cycle pushes the counts of the keys that need a sync and pulls their totals, in pipelines. The tables measure what a cycle costs the instance and Redis, per key-sync, and how many dirty keys one Redis keeps up with.\n\n")
	p("Generated by `benchmarks/run.sh%s` on %s with [%s](%s), from the same run; do not edit it by hand. What syncing costs Redis and the instance, and how many dirty keys one Redis keeps up with; [%s](%s) says how the cells are computed, on what machine, and holds the rest of the run.\n\n",
		ifs(r.Meta["mode"] == "quick", " -quick", ""), orDash(r.Meta["date"]), path.Base(r.SyncBack), r.SyncBack, path.Base(r.SyncBack), r.SyncBack)
	r.writeSync(p)
}

// WriteDetail renders the page of the per-key check tables, the ratios,
// the algorithms, the telemetry cost and the setup that the report links to
// (DetailPage).
func (r *Report) WriteDetail(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# sluice performance: the whole run\n\nGenerated by `benchmarks/run.sh%s` on %s with [%s](%s), from the same run; do not edit it by hand. The per-key checks beside the floor and the peers, the ratios, every algorithm, the telemetry cost and the setup; [%s](%s) says how the cells are computed, on what machine, and holds the targets.\n\n",
		ifs(r.Meta["mode"] == "quick", " -quick", ""), orDash(r.Meta["date"]), path.Base(r.DetailBack), r.DetailBack, path.Base(r.DetailBack), r.DetailBack)
	r.writeCheckTables(p)
	r.writeBeside(p)
	r.writeRatios(p)
	r.writeAlgorithms(p)
	r.writeTelemetry(p)
	r.writeSetup(p)
}

type printer func(string, ...any)

// The markers around what the pages hold of a run: docs_test.go, at the
// repository's root, checks that every measurement in docs/ sits between
// such markers.
const (
	generatedBegin = "<!-- generated by benchmarks/run.sh: begin -->"
	generatedEnd   = "<!-- generated by benchmarks/run.sh: end -->"
)

func ifs(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func verdict(ok, known bool) string {
	switch {
	case !known:
		return "not measured"
	case ok:
		return "**met**"
	}
	return "**missed**"
}

func (r *Report) writeCheckTables(p printer) {
	for _, path := range []string{"allow", "deny"} {
		if path == "allow" {
			p("## Per-key check: allow path\n\nA key far from its limit: the check admits. ns per check; lower is better.\n\n")
		} else {
			p("## Per-key check: deny path\n\nA key at its limit: the check denies. ns per check; lower is better. (No floor: the floor has no limit.)\n\n")
		}
		var cols []libCol
		for _, c := range allowLibs {
			for _, set := range sets {
				if r.nsOf(set, path, c.lib, "serial").OK || r.nsOf(set, path, c.lib, "parallel").OK {
					cols = append(cols, c)
					break
				}
			}
		}
		p("| key set | mode |")
		for _, c := range cols {
			p(" %s |", c.title)
		}
		p("\n|---|---|")
		for range cols {
			p("--:|")
		}
		p("\n")
		for _, set := range sets {
			for _, mode := range modes {
				p("| %s | %s |", setNames[set], mode)
				for _, c := range cols {
					p(" %s |", fmtNs(r.nsOf(set, path, c.lib, mode)))
				}
				p("\n")
			}
		}
		if path == "allow" {
			for _, mode := range modes {
				if s := r.timeNow(mode); s.OK {
					p("\nFor scale, `time.Now()` alone, %s: %s.", mode, fmtNs(s))
				}
			}
			p("\n\n")
		} else {
			p("\n")
		}
		r.writeUnexpected(p, path)
		r.writeAllocs(p, path, cols)
	}
}

// writeUnexpected lists the checks through Redis that were not decided as
// the path expects (the remote benchmarks count them instead of failing).
func (r *Report) writeUnexpected(p printer, path string) {
	var parts []string
	known := false
	for _, lib := range []string{"sluice-strict", "redis_rate"} {
		for _, set := range sets {
			for _, mode := range modes {
				vs := r.Data[checkName("CheckRemote", set, path, lib, mode)]["unexpected/op"]
				if vs == nil {
					continue
				}
				known = true
				var sum float64
				for _, v := range vs {
					sum += v
				}
				if sum > 0 {
					parts = append(parts, fmt.Sprintf("%s %s %s: %.3g%% (mean of %d runs)", libTitle(lib), setNames[set], mode, 100*sum/float64(len(vs)), len(vs)))
				}
			}
		}
	}
	switch {
	case !known:
	case len(parts) == 0:
		p("Every check through Redis was decided as expected.\n\n")
	default:
		want := "denied"
		if path == "deny" {
			want = "admitted"
		}
		p("**Checks through Redis not decided as expected** (%s, or failed; counted, not fatal): %s. For sluice strict these are checks whose round trip exceeded `Options.Timeout` (50 ms) and were decided by the failure mode.\n\n", want, strings.Join(parts, "; "))
	}
}

func (r *Report) timeNow(mode string) Stat {
	s := r.Data.Get("TimeNow/mode="+mode, "sec/op")
	s.Median *= 1e9
	s.Lo *= 1e9
	s.Hi *= 1e9
	return s
}

// writeAllocs lists, per library, the range of B/op and allocs/op over the
// rows of one path.
func (r *Report) writeAllocs(p printer, path string, cols []libCol) {
	p("<details><summary>Allocations on the %s path (B/op, allocs/op; min–max over key sets and modes)</summary>\n\n| library | B/op | allocs/op |\n|---|--:|--:|\n", path)
	for _, c := range cols {
		var bmin, bmax, amin, amax = math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
		for _, set := range sets {
			for _, mode := range modes {
				n := checkName(c.bench, set, path, c.lib, mode)
				if s := r.Data.Get(n, "B/op"); s.OK {
					bmin, bmax = math.Min(bmin, s.Median), math.Max(bmax, s.Median)
				}
				if s := r.Data.Get(n, "allocs/op"); s.OK {
					amin, amax = math.Min(amin, s.Median), math.Max(amax, s.Median)
				}
			}
		}
		if math.IsInf(bmin, 1) {
			continue
		}
		p("| %s | %s | %s |\n", c.title, rng(bmin, bmax), rng(amin, amax))
	}
	p("\nB/op and allocs/op count every allocation in the process while the loop runs, including background goroutines: for *sluice eventual* that is the syncer pushing what the loop admits, not the check itself (allocs/op rounds down to whole allocations per check).\n\n</details>\n\n")
}

func rng(a, b float64) string {
	if a == b {
		return fmt.Sprintf("%.0f", a)
	}
	return fmt.Sprintf("%.0f–%.0f", a, b)
}

func (r *Report) writeRatios(p printer) {
	p("## Ratios (same run)\n\n")
	p("**sluice ÷ floor** (allow path; 1.00× = as fast as a bare map load plus one atomic add; lower is better):\n\n")
	p("| key set | mode | eventual | eventual, idle syncer | local |\n|---|---|--:|--:|--:|\n")
	for _, set := range sets {
		for _, mode := range modes {
			f := r.nsOf(set, "allow", "floor", mode)
			p("| %s | %s |", setNames[set], mode)
			for _, lib := range []string{"sluice-eventual", "sluice-eventual-idle", "sluice-local"} {
				p(" %s |", fmtRatio(ratio(r.nsOf(set, "allow", lib, mode), f)))
			}
			p("\n")
		}
	}
	p("\n**sluice ÷ floor behind the API** (*floor behind the API* is the floor inside a non-inlined method with `AllowN`'s signature that returns a `Decision`: what any limiter with this API pays at least. Its first column, ÷ the floor, is the price of the API contract itself; the others are what sluice adds to it):\n\n")
	p("| key set | mode | floor behind the API ÷ floor | eventual | eventual, idle syncer | local |\n|---|---|--:|--:|--:|--:|\n")
	for _, set := range sets {
		for _, mode := range modes {
			f := r.nsOf(set, "allow", "floor-api", mode)
			p("| %s | %s | %s |", setNames[set], mode, fmtRatio(ratio(f, r.nsOf(set, "allow", "floor", mode))))
			for _, lib := range []string{"sluice-eventual", "sluice-eventual-idle", "sluice-local"} {
				p(" %s |", fmtRatio(ratio(r.nsOf(set, "allow", lib, mode), f)))
			}
			p("\n")
		}
	}
	p("\n**peer ÷ sluice eventual** (how many times faster sluice's default mode is than each peer; above 1.00× sluice is faster):\n\n")
	for _, path := range []string{"allow", "deny"} {
		sl := "sluice-eventual"
		if path == "deny" {
			sl = "sluice-eventual-idle"
			p("\nDeny path (sluice eventual with an idle syncer: see *Setup*):\n\n")
		}
		p("| key set | mode | sethvargo | x/time/rate | ulule | fastest local peer | redis_rate |\n|---|---|--:|--:|--:|--:|--:|\n")
		for _, set := range sets {
			for _, mode := range modes {
				s := r.nsOf(set, path, sl, mode)
				p("| %s | %s |", setNames[set], mode)
				for _, peer := range localPeers {
					p(" %s |", fmtRatio(ratio(r.nsOf(set, path, peer, mode), s)))
				}
				best, name := r.fastestPeer(set, path, mode)
				x, ok := ratio(best, s)
				p(" %s |", ifs(ok, fmtRatio(x, ok)+" ("+name+")", "—"))
				p(" %s |\n", fmtRatio(ratio(r.nsOf(set, path, "redis_rate", mode), s)))
			}
		}
	}
	p("\n**deny ÷ allow** (same library, same key set and mode; at most 1.00× means denying costs no more than admitting):\n\n")
	p("| key set | mode | sluice eventual, idle syncer | sluice local | sethvargo | x/time/rate | ulule |\n|---|---|--:|--:|--:|--:|--:|\n")
	for _, set := range sets {
		for _, mode := range modes {
			p("| %s | %s |", setNames[set], mode)
			for _, lib := range []string{"sluice-eventual-idle", "sluice-local", "sethvargo", "xrate-xsync", "ulule"} {
				p(" %s |", fmtRatio(ratio(r.nsOf(set, "deny", lib, mode), r.nsOf(set, "allow", lib, mode))))
			}
			p("\n")
		}
	}
	p("\n")
}

func (r *Report) syncStat(size, unit string) Stat {
	return r.Data.Get("Sync/dirty="+size, unit)
}

func (r *Report) writeSync(p printer) {
	sizes := []string{"1k", "10k", "100k", "10k,full", "10k,counts"}
	incr := r.Data.Get("RedisINCR/P=64", "ops/s")
	incr1 := r.Data.Get("RedisINCR/P=1", "ops/s")
	p("## Sync against a real Redis\n\n")
	p("One sluice instance, SyncInterval 1h (nothing syncs by itself): each iteration admits once on N keys (untimed), then `Flush` runs one full cycle that pushes and pulls every dirty key (timed). Counters from `Stats().Sync` and Redis `INFO` before and after. A key-sync is one key pushed and pulled. On this standalone Redis every key takes the *bulk path* (docs/design.md): one script call per pipeline of 256 keys adds the counts, then one `HGETALL` per key pulls its window; the benchmark's rule has a 1-hour window, so nearly every push lands in a bucket that exists and skips the TTL refresh, and each key's hash holds one bucket. *10k,full* is 10k keys whose hashes hold a count in every bucket of the window, as a key busy for a whole window has them; *10k,counts* admits key i 1 + i mod 256 times per cycle instead of once, so that a pipeline's keys have nearly as many different counts as keys. Keys with a reservation, a correction or an unanswered per-key batch, and every key on a Redis Cluster, take one sync-script call each instead.\n\n")
	p("| dirty keys per cycle | cycle latency (Flush) | key-syncs/s | key-syncs per cycle | round trips per cycle | commands sent per key-sync | Redis commands per key-sync | Redis bytes in+out per key-sync | Redis CPU per key-sync | Redis memory per key | Go allocations per key-sync |\n|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, sz := range sizes {
		lat := r.syncStat(sz, "sec/op")
		if !lat.OK {
			continue
		}
		lat.Median, lat.Lo, lat.Hi = lat.Median*1e9, lat.Lo*1e9, lat.Hi*1e9
		allocs := "—"
		if a, kc := r.syncStat(sz, "allocs/op"), r.syncStat(sz, "keysyncs/cycle"); a.OK && kc.OK && kc.Median > 0 {
			allocs = fmt.Sprintf("%.1f (%.0f B)", a.Median/kc.Median, r.syncStat(sz, "B/op").Median/kc.Median)
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", sz, fmtNs(lat),
			fmtNum(r.syncStat(sz, "keysyncs/s"), "%.0f"),
			fmtNum(r.syncStat(sz, "keysyncs/cycle"), "%.0f"),
			fmtNum(r.syncStat(sz, "roundtrips/cycle"), "%.0f"),
			fmtNum(r.syncStat(sz, "cmds/keysync"), "%.2f"),
			fmtNum(r.syncStat(sz, "redis-cmds/keysync"), "%.2f"),
			fmtNum(r.syncStat(sz, "bytes/keysync"), "%.0f B"),
			fmtNum(r.syncStat(sz, "redis-cpu-us/keysync"), "%.1f µs"),
			fmtNum(r.syncStat(sz, "redis-B/key"), "%.0f B"), allocs)
	}
	p("\n*Redis commands per key-sync* counts what Redis executed (INFO `total_commands_processed`), which includes the commands the sync script calls inside Redis; *commands sent* is what the syncer put on the wire (its `Stats().Sync.Commands`, heartbeat included). Bytes are INFO `total_net_input_bytes + total_net_output_bytes`, less the INFO calls themselves. Redis memory per key is the INFO `used_memory` growth when N new keys are first synced, divided by N.\n\n")
	if incr.OK {
		p("Same Redis, same run: `redis-benchmark -t incr -P 64 -n 1000000 -q`: **%s INCR/s**", fmtNum(incr, "%.0f"))
		if c := r.Data.Get("RedisINCR/P=64", "redis-cpu-us/op"); c.OK {
			p(" (Redis CPU %.2f µs per INCR)", c.Median)
		}
		if incr1.OK {
			p("; unpipelined (`-t incr -n 100000`): %s INCR/s", fmtNum(incr1, "%.0f"))
		}
		p(". Redis CPU is INFO `used_cpu_user + used_cpu_sys`; where it is close to the wall time, Redis, single-threaded, is the bottleneck.\n\n")
		p("| dirty keys per cycle | key-syncs/s ÷ INCR/s at -P 64 | Redis CPU per key-sync, in INCRs at -P 64 |\n|--:|--:|--:|\n")
		for _, sz := range sizes {
			if ks := r.syncStat(sz, "keysyncs/s"); ks.OK {
				x, ok := ratio(ks, incr)
				y, yok := ratio(r.syncStat(sz, "redis-cpu-us/keysync"), r.Data.Get("RedisINCR/P=64", "redis-cpu-us/op"))
				in := "—"
				if yok {
					in = fmt.Sprintf("%.1f", y)
				}
				p("| %s | %s | %s |\n", sz, fmtPct(x, ok), in)
			}
		}
		p("\n")
	}
	r.writeSyncFloor(p)
	r.writeCapacity(p, sizes)
}

// writeSyncFloor writes BenchmarkSyncFloor: what the parts of a key-sync
// cost Redis alone, in INCRs at -P 64 of the same run.
func (r *Report) writeSyncFloor(p printer) {
	shapes := []struct{ name, what string }{
		{"incr", "`INCR` through go-redis, pipelines of 256"},
		{"hincrby", "`HINCRBY` of the current bucket: a push, not retry-safe"},
		{"hgetall", "`HGETALL`: the bulk path's pull"},
		{"hmget", "`HMGET` of span + 2 buckets: the pull it replaced"},
		{"hincrby+hgetall", "a push and a pull: a key-sync, not retry-safe"},
		{"lua-hincrby", "one script call per 256 keys that only calls `HINCRBY` for each: the least a push through a script costs"},
	}
	unit := r.Data.Get("RedisINCR/P=64", "redis-cpu-us/op")
	if !r.Data.Get("SyncFloor/shape=incr/hash=one", "redis-cpu-us/key").OK || !unit.OK {
		return
	}
	p("### What the parts of a key-sync cost Redis\n\n")
	p("`BenchmarkSyncFloor`: each part alone, as the syncer sends it (go-redis, one connection, pipelines of 256), over 10k keys whose hashes hold one bucket or the window's eleven. Redis CPU per key, median over the runs, and in INCRs at `-P 64` (%.2f µs each in this run). The bulk path's key-sync is a script push and an `HGETALL`: compare the table above with the script's push plus the pull. `redis-benchmark` increments one key over and over, which stays in the CPU's caches; the parts here, like the key-syncs, touch 10k keys among everything the run has stored in this Redis, so the first row, `INCR` over those keys, is the unit with the same cache misses.\n\n", unit.Median)
	p("| part | one bucket | in INCRs | full window | in INCRs |\n|---|--:|--:|--:|--:|\n")
	for _, sh := range shapes {
		one := r.Data.Get("SyncFloor/shape="+sh.name+"/hash=one", "redis-cpu-us/key")
		full := r.Data.Get("SyncFloor/shape="+sh.name+"/hash=full", "redis-cpu-us/key")
		x, xok := ratio(one, unit)
		y, yok := ratio(full, unit)
		p("| %s | %s | %s | %s | %s |\n", sh.what, fmtNum(one, "%.2f µs"), fmtX(x, xok), fmtNum(full, "%.2f µs"), fmtX(y, yok))
	}
	p("\n")
}

func fmtX(x float64, ok bool) string {
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.1f", x)
}

// writeCapacity says how many dirty keys per sync interval one Redis keeps
// up with, from the slowest key-sync rate of the run, and what happens
// beyond.
func (r *Report) writeCapacity(p printer, sizes []string) {
	slowest := Stat{}
	for _, sz := range sizes {
		if ks := r.syncStat(sz, "keysyncs/s"); ks.OK && (!slowest.OK || ks.Median < slowest.Median) {
			slowest = ks
		}
	}
	if !slowest.OK {
		return
	}
	p("### How many dirty keys one Redis keeps up with\n\n")
	p("At the slowest rate of this run, %.0f key-syncs/s, one instance's syncer keeps up with about **%.0f dirty keys per 100 ms interval** (%.0f per 1 s interval), with Redis and the instance on the same 2 cores. Several instances share one Redis: divide by their number (Redis CPU per key-sync, above, is what they share).\n\n", slowest.Median, slowest.Median/10, slowest.Median)
	p("Beyond that, cycles stretch; they never overlap and nothing is lost. One goroutine runs the cycles, so a cycle that outlasts the interval delays the next (a tick that comes meanwhile starts the next cycle as soon as it ends; further ticks are dropped, not queued). Counts admitted while a cycle runs stay pending in the entry and go out with the next cycle; a key admitted during its own sync is marked dirty again. An instance keeps heartbeating during a long cycle (every interval), so it stays counted in N̂. What stretching costs is accuracy headroom, not the bound: an instance that reaches its cap ⌊ε·L/(N̂+1)⌋ of unsynced counts on a key hands further checks of that key to Redis (reservations, served between pipelines of the long cycle), so checks on the hottest keys get slower while the fleet stays within its budget.\n\n")
}

func fmtNum(s Stat, format string) string {
	if !s.OK {
		return "—"
	}
	v := fmt.Sprintf(format, s.Median)
	if ci := s.CI(); ci >= 0 {
		v += fmt.Sprintf(" ±%.0f%%", ci)
	}
	return v
}

func fmtPct(x float64, ok bool) string {
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*x)
}

var memLibs = []struct{ lib, title string }{
	{"floor", "floor (xsync.MapOf + *atomic.Int64)"},
	{"sluice-local", "sluice local (sliding window, 10 sub-windows)"},
	{"sluice-local-fixed", "sluice local (fixed window)"},
	{"sluice-eventual", "sluice eventual (sliding window, 10 sub-windows; Redis, idle syncer)"},
	{"sethvargo", "sethvargo memorystore"},
	{"xrate-xsync", "x/time/rate + xsync map"},
	{"ulule", "ulule memory"},
}

func (r *Report) writeMemory(p printer) {
	p("## Memory per tracked key (1M keys)\n\n")
	p("`runtime.GC` and `ReadMemStats` before; one check on each of 1M new keys of exactly 16 bytes (each key string built fresh, one 16-byte allocation); `runtime.GC` and `ReadMemStats` after, limiter alive. The delta therefore holds exactly one 16-byte copy of each key, whoever owns it (sluice clones the key it stores); the *without key* column subtracts it.\n\n")
	p("| library | HeapAlloc per key | without the key | HeapInuse per key |\n|---|--:|--:|--:|\n")
	for _, l := range memLibs {
		n := "Memory/lib=" + l.lib
		a := r.Data.Get(n, "heapalloc-B/key")
		if !a.OK {
			continue
		}
		k := r.Data.Get(n, "key-B/key")
		p("| %s | %.0f B | %.0f B | %.0f B |\n", l.title, a.Median, a.Median-k.Median, r.Data.Get(n, "heapinuse-B/key").Median)
	}
	p("\n")
}

func (r *Report) writeTargets(p printer) {
	p("## Targets\n\nThe project's performance targets, against this run. *sluice eventual* is the default configuration (Redis, 100 ms sync interval, the syncer running during the benchmark); *idle syncer* is the same with SyncInterval 1h, i.e. the check alone.\n\n")
	p("| target | measured | verdict |\n|---|---|---|\n")

	// 1. zero allocations.
	{
		var worst float64
		var worstB float64
		known := false
		for _, lib := range []string{"sluice-eventual", "sluice-eventual-idle"} {
			for _, set := range sets {
				for _, mode := range modes {
					n := checkName("Check", set, "allow", lib, mode)
					if a := r.Data.Get(n, "allocs/op"); a.OK {
						known = true
						worst = math.Max(worst, a.Median)
						worstB = math.Max(worstB, r.Data.Get(n, "B/op").Median)
					}
				}
			}
		}
		p("| Allow (eventual) does not allocate | at most %.0f allocs/op (B/op up to %.0f: the background syncer, see the allocation tables) | %s |\n", worst, worstB, verdict(worst == 0, known))
	}
	// 2. within 1.3x floor.
	for _, lib := range []string{"sluice-eventual", "sluice-eventual-idle"} {
		worst, where, known := 0.0, "", true
		var parts []string
		for _, set := range sets {
			for _, mode := range modes {
				x, ok := ratio(r.nsOf(set, "allow", lib, mode), r.nsOf(set, "allow", "floor", mode))
				if !ok {
					known = false
					continue
				}
				parts = append(parts, fmt.Sprintf("%s %s %s", set, mode, fmtRatio(x, ok)))
				if x > worst {
					worst, where = x, set+" "+mode
				}
			}
		}
		measured := "—"
		if where != "" {
			measured = fmt.Sprintf("worst %s (%s); %s", fmtRatio(worst, true), where, strings.Join(parts, ", "))
		}
		p("| Allow within 1.3× the floor on every key set, serial and parallel (%s) | %s | %s |\n", libTitle(lib), measured, verdict(worst <= 1.3, known && where != ""))
	}
	// 2b. context for 2: the same against the floor behind the API.
	{
		worst, where := 0.0, ""
		for _, set := range sets {
			for _, mode := range modes {
				if x, ok := ratio(r.nsOf(set, "allow", "sluice-eventual-idle", mode), r.nsOf(set, "allow", "floor-api", mode)); ok && x > worst {
					worst, where = x, set+" "+mode
				}
			}
		}
		if where != "" {
			p("| (context, not a target) idle syncer within 1.3× the floor behind the API | worst %s (%s) | — |\n", fmtRatio(worst, true), where)
		}
	}
	// 3/4. vs fastest local peer.
	for _, lib := range []string{"sluice-eventual", "sluice-eventual-idle"} {
		for _, group := range []struct {
			sets []string
			need float64
			text string
		}{
			{[]string{"hot", "10k"}, 1.5, "≥1.5× faster than the fastest local peer on the hot key and 10k keys"},
			{[]string{"1M-zipf"}, 1.0, "no slower than the fastest local peer on 1M Zipf keys"},
		} {
			worst, known := math.Inf(1), false
			var parts []string
			for _, set := range group.sets {
				for _, mode := range modes {
					best, name := r.fastestPeer(set, "allow", mode)
					x, ok := ratio(best, r.nsOf(set, "allow", lib, mode))
					if !ok {
						continue
					}
					known = true
					worst = math.Min(worst, x)
					parts = append(parts, fmt.Sprintf("%s %s %s vs %s", set, mode, fmtRatio(x, ok), name))
				}
			}
			p("| %s (%s) | %s | %s |\n", group.text, libTitle(lib), strings.Join(parts, "; "), verdict(worst >= group.need, known))
		}
	}
	// 5. deny no slower than allow.
	for _, lib := range []string{"sluice-eventual-idle", "sluice-local"} {
		worst, known := 0.0, false
		var parts []string
		for _, set := range sets {
			for _, mode := range modes {
				x, ok := ratio(r.nsOf(set, "deny", lib, mode), r.nsOf(set, "allow", lib, mode))
				if !ok {
					continue
				}
				known = true
				worst = math.Max(worst, x)
				parts = append(parts, fmt.Sprintf("%s %s %s", set, mode, fmtRatio(x, ok)))
			}
		}
		p("| Deny no slower than allow (%s; deny ÷ allow) | %s | %s |\n", libTitle(lib), strings.Join(parts, ", "), verdict(worst <= 1.0, known))
	}
	// 6. 10M checks/s on 10k keys.
	for _, lib := range []string{"sluice-eventual", "sluice-eventual-idle"} {
		s := r.nsOf("10k", "allow", lib, "parallel")
		rate := 0.0
		if s.OK {
			rate = 1e9 / s.Median
		}
		p("| ≥10M checks/s in total on 10k keys (%s, parallel) | %.1fM checks/s | %s |\n", libTitle(lib), rate/1e6, verdict(rate >= 10e6, s.OK))
	}
	// 7. 500x redis_rate.
	{
		worst, known := math.Inf(1), false
		var parts []string
		for _, set := range sets {
			for _, mode := range modes {
				x, ok := ratio(r.nsOf(set, "allow", "redis_rate", mode), r.nsOf(set, "allow", "sluice-eventual", mode))
				if !ok {
					continue
				}
				known = true
				worst = math.Min(worst, x)
				parts = append(parts, fmt.Sprintf("%s %s %s", set, mode, fmtRatio(x, ok)))
			}
		}
		p("| ≥500× faster than redis_rate (sluice eventual) | %s | %s |\n", strings.Join(parts, ", "), verdict(worst >= 500, known))
	}
	// 8. sync rate vs INCR -P 64.
	{
		incr := r.Data.Get("RedisINCR/P=64", "ops/s")
		best, bestSz := Stat{}, ""
		var parts []string
		for _, sz := range []string{"1k", "10k", "100k"} {
			ks := r.syncStat(sz, "keysyncs/s")
			if !ks.OK {
				continue
			}
			x, ok := ratio(ks, incr)
			parts = append(parts, fmt.Sprintf("%s dirty: %.0f/s = %s", sz, ks.Median, fmtPct(x, ok)))
			if !best.OK || ks.Median > best.Median {
				best, bestSz = ks, sz
			}
		}
		x, ok := ratio(best, incr)
		p("| Syncer ≥30%% of redis-benchmark -P 64 INCR/s in key-syncs/s (INCR: %s/s) | %s | %s |\n", fmtNum(incr, "%.0f"), strings.Join(parts, "; "), verdict(ok && x >= 0.3, ok && bestSz != ""))
	}
	// 9. 10k cycle < 50ms.
	{
		s := r.syncStat("10k", "sec/op")
		p("| 10k-dirty-key sync cycle < 50 ms | %s | %s |\n", fmtDur(s.Median*1e9), verdict(s.Median < 0.05, s.OK))
	}
	// Telemetry: Allow with the SDK within 5% of Allow with it off.
	if worst, parts, allocs, known := r.telemetryCost(); known {
		p("| Allow with telemetry on (OTel SDK) within 5%% of off, 0 allocs (sluice eventual, idle syncer; on ÷ off) | %s; at most %.0f allocs/op | %s |\n", strings.Join(parts, ", "), allocs, verdict(worst <= 1.05 && allocs == 0, known))
	}
	// 10. ≤200 bytes/key.
	{
		a := r.Data.Get("Memory/lib=sluice-local", "heapalloc-B/key")
		k := r.Data.Get("Memory/lib=sluice-local", "key-B/key")
		p("| ≤200 bytes per tracked key locally (sluice local, 1M keys) | %.0f B with its 16-B key copy, %.0f B without | %s |\n", a.Median, a.Median-k.Median, verdict(a.Median <= 200, a.OK))
	}
	p("\n")
}

func libTitle(lib string) string {
	for _, c := range allowLibs {
		if c.lib == lib {
			return c.title
		}
	}
	return lib
}

func (r *Report) writeSetup(p printer) {
	p("## Setup\n\n")
	p("- **Key sets** (`benchmarks/keys.go`), built before any timed loop; the loops walk a precomputed sample of draws (`sample[i & mask]`), so no key is built and no random number drawn while timing. The sample holds copies of the keys that filled the limiters, as each request brings its own string (with the filling strings themselves, Go's string comparison would stop at the equal pointers and spare the libraries that store the caller's string a read). Keys are 16 bytes (`k:` and 14 digits). *1 hot key*; *10k keys* drawn uniformly (2²⁰ draws); *1M keys* with P(rank r) ∝ r^-1.1, and a flatter set with r^-1.0, under which many more distinct keys are touched per sync interval (2²² draws each; ranks mapped to keys by a random permutation); *churn*: 256Ki keys over 2²² draws, 10k of them alive at any draw and drawn uniformly, each appearing, drawn about 16 times over a life of about 166k draws and replaced. Every key of a set is tracked before timing, by every library, except on the churn set: there every library starts each run empty (maps not presized, the floor's included) and meets the keys in the timed loop, and every sluice instance that used Redis ends with a `FLUSHALL`, so that each starts on an empty Redis. The churn set has no deny path and no checks through Redis. `TestDistributions` checks the samples:\n")
	for _, d := range r.Dist {
		p("  - %s\n", d)
	}
	p("- **Floor**: an `xsync.MapOf[string, *atomic.Int64]` load plus one atomic add, on the same samples. *Floor behind the API*: the same inside a non-inlined method with `Limiter.AllowN`'s signature that returns a `Decision`, called by the same loop as sluice; `Decision`'s five fields are one more than Go keeps in registers, so every caller of such an API pays a store-forwarding stall (measured: the *floor behind the API* column).\n")
	p("- **sluice** (this tree, through the public `Limiter.Allow`): rule Window 1h, default sliding window of 10 sub-windows. Allow path: Limit `policy.MaxLimit`, ErrorBudget 1, so the divergence cap (about 2.1·10⁹) is never reached and every check is local. *Eventual*: a real Redis (throwaway `redis-server` on a free loopback port), default SyncInterval 100 ms; every key is tracked and `Flush`ed before timing, then the syncer pushes what the loop admits while it runs, on the same 2 cores. *Idle syncer*: SyncInterval 1h (the check alone). *Local*: no Redis. *Strict*: every check is one store round trip (batched across goroutines by the syncer).\n")
	p("- **Deny path**: sluice local Limit 1, used up by one check per key. Sluice eventual: Limit 2 with an idle syncer (cap ⌊1·2/2⌋ = 1): one check on every key the sample draws, `Flush`, one more check on each; those keys are then full (1 synced + 1 pending) and denied locally, and nothing syncs while timing; the set's other keys are then tracked with one check each. (Filling through the store would take a reservation per key, at a few thousand per second, and the default 100 ms syncer would push the pending halves during the loop, so the deny path is measured with the idle syncer only.) Peers: a limit of 1 per hour, used up by one check. Then, for every library, one denied check of every key the sample draws, so that the loops measure keys under a flood of denials: sluice's first denial of a key in a sub-window takes the slow path and caches the denial in the entry (on the 1M-key Zipf set that first denial is the difference between about 215 and 256–415 ns per denial, serial).\n")
	p("- **Peers**: `github.com/sethvargo/go-limiter/memorystore` (Tokens = limit, Interval 1h); `golang.org/x/time/rate` with one `*rate.Limiter` per key in an **xsync.MapOf** (the same map as the floor, so the difference is the limiter; sluice's window counters keep their own key map, which stores each key inside its entry; finite rate, `Allow()` reads `time.Now`); `github.com/ulule/limiter/v3` memory store (Period 1h); `github.com/go-redis/redis_rate/v10` on the same Redis (GCRA script, one round trip per check, pool of 128 connections).\n")
	p("- **Remote checks** (sluice strict, redis_rate) walk the first 2¹⁶ draws of each sample (17k distinct keys for the Zipf set) so that the deny-path keys can be filled in seconds; a round trip costs the same whatever the local caches hold.\n")
	p("- Every in-process loop is metered (see *What runs beside the checks* above): each loop goroutine is locked to its OS thread while it runs, for every library alike.\n")
	p("- Every benchmark calls `b.ReportAllocs()`. The loops check every decision: in process, an allow-path denial or a deny-path admission fails the run; through Redis, such decisions are counted (metric `unexpected/op`, listed under the tables), since a slow round trip legitimately ends in sluice's failure mode.\n\n")
}

func (r *Report) writeEnv(p printer) {
	p("## Machine, versions, reproduction\n\n| | |\n|---|---|\n")
	keys := append([]string(nil), r.MetaOrder...)
	if len(keys) == 0 {
		for k := range r.Meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
	}
	for _, k := range keys {
		if k == "machine_note" || k == "reproduce" || k == "count_algos" {
			continue
		}
		p("| %s | %s |\n", k, strings.ReplaceAll(r.Meta[k], "|", "\\|"))
	}
	p("\nTo reproduce (needs `redis-server` and `redis-benchmark` in PATH, Go 1.26):\n\n```sh\ncd benchmarks\n./run.sh          # full run, about 20 minutes on an idle 2-core machine; writes ../docs/performance.md\n./run.sh -quick   # about 8 minutes: 3 repetitions, shorter runs\n./run.sh -profile # also CPU profiles of the sluice benchmarks (pprof -top) in the output directory\n```\n\n")
	p("The raw results and benchstat's output are kept in the output directory the script prints (`-out DIR` to choose it). To compare two runs: `go tool benchstat old/results.txt new/results.txt` inside `benchmarks/`. Single benchmarks: `go test -run '^$' -bench 'BenchmarkCheck/set=10k/path=allow' -count 10 .`\n\n")
	p("A 2-core VM is noisy: differences within the confidence intervals are not differences. The `redis-server` under test runs on the same two cores as the benchmark (and, for eventual mode, as the syncer).\n\n")
}

// telemetryName is the name of a BenchmarkTelemetry result.
func telemetryName(set, tel, mode string) string {
	return "Telemetry/set=" + set + "/tel=" + tel + "/mode=" + mode
}

// telemetryNs returns the ns per check of a BenchmarkTelemetry result.
func (r *Report) telemetryNs(set, tel, mode string) Stat {
	s := r.Data.Get(telemetryName(set, tel, mode), "sec/op")
	s.Median *= 1e9
	s.Lo *= 1e9
	s.Hi *= 1e9
	return s
}

// telemetrySets are the key sets of BenchmarkTelemetry.
var telemetrySets = []string{"hot", "10k"}

// telemetryCost returns the worst ratio of Allow with the SDK to Allow with
// telemetry off, each ratio as text, and the most allocs/op of any setting.
func (r *Report) telemetryCost() (worst float64, parts []string, allocs float64, known bool) {
	for _, set := range telemetrySets {
		for _, mode := range modes {
			x, ok := ratio(r.telemetryNs(set, "sdk", mode), r.telemetryNs(set, "off", mode))
			if !ok {
				continue
			}
			known = true
			worst = math.Max(worst, x)
			parts = append(parts, fmt.Sprintf("%s %s %s", set, mode, fmtRatio(x, ok)))
			for _, tel := range []string{"off", "global", "sdk"} {
				allocs = math.Max(allocs, r.Data.Get(telemetryName(set, tel, mode), "allocs/op").Median)
			}
		}
	}
	return worst, parts, allocs, known
}

// writeTelemetry writes what the metrics cost a check: Allow with telemetry
// off, with the global provider nobody set, and with the OTel SDK.
func (r *Report) writeTelemetry(p printer) {
	if _, _, _, known := r.telemetryCost(); !known {
		return
	}
	p("## Telemetry cost\n\n")
	p("Allow on the allow path (sluice eventual, idle syncer), with telemetry *off* (`Options.MeterProvider` is the no-op provider: checks are not counted), with the *global* provider that no application set (the default: checks are not counted until an application sets it), and with the *OTel SDK* (a `ManualReader`, collected after the timed loop). The three run side by side in the same process. ns per check; lower is better.\n\n")
	p("| key set | mode | off | global (default) | OTel SDK | SDK ÷ off | allocs/op (off, global, SDK) |\n|---|---|--:|--:|--:|--:|--:|\n")
	for _, set := range telemetrySets {
		for _, mode := range modes {
			off, glob, sdk := r.telemetryNs(set, "off", mode), r.telemetryNs(set, "global", mode), r.telemetryNs(set, "sdk", mode)
			var al []string
			for _, tel := range []string{"off", "global", "sdk"} {
				if a := r.Data.Get(telemetryName(set, tel, mode), "allocs/op"); a.OK {
					al = append(al, fmt.Sprintf("%.0f", a.Median))
				} else {
					al = append(al, "—")
				}
			}
			x, ok := ratio(sdk, off)
			p("| %s | %s | %s | %s | %s | %s | %s |\n", setNames[set], mode, fmtNs(off), fmtNs(glob), fmtNs(sdk), fmtRatio(x, ok), strings.Join(al, ", "))
		}
	}
	p("\n")
}

// Spread is the smallest, median and largest of a benchmark's values.
type Spread struct {
	Min, Median, Max float64
	N                int
}

// Spread returns the spread of name's unit, scaled by k.
func (d Data) Spread(name, unit string, k float64) (Spread, bool) {
	vs := append([]float64(nil), d[name][unit]...)
	if len(vs) == 0 {
		return Spread{}, false
	}
	sort.Float64s(vs)
	m := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		m = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return Spread{Min: k * vs[0], Median: k * m, Max: k * vs[len(vs)-1], N: len(vs)}, true
}

func (s Spread) fmtDur() string {
	return fmt.Sprintf("%s (%s–%s)", fmtDur(s.Median), fmtDur(s.Min), fmtDur(s.Max))
}

func (s Spread) fmtNum(format string) string {
	return fmt.Sprintf(format+" ("+format+"–"+format+")", s.Median, s.Min, s.Max)
}

// nsSpread is the spread of ns per check of a library on a row: wall time
// (sec/op) or, with cpu, the loop goroutines' CPU time (loop-cpu-ns/op).
func (r *Report) nsSpread(set, path, lib, mode string, cpu ...bool) (Spread, bool) {
	if len(cpu) > 0 && cpu[0] {
		// benchfmt tidies "ns/op" units into seconds: loop-cpu-sec/op.
		return r.Data.Spread(checkName(r.libBench(lib), set, path, lib, mode), "loop-cpu-sec/op", 1e9)
	}
	return r.Data.Spread(checkName(r.libBench(lib), set, path, lib, mode), "sec/op", 1e9)
}

// fastestPeerSpread is the spread of the local peer with the lowest median
// on a row, and its name.
func (r *Report) fastestPeerSpread(set, path, mode string, cpu bool) (Spread, string, bool) {
	var best Spread
	name := ""
	for _, p := range localPeers {
		if s, ok := r.nsSpread(set, path, p, mode, cpu); ok && (name == "" || s.Median < best.Median) {
			best, name = s, p
		}
	}
	return best, name, name != ""
}

// writeManyKeys is the scorecard at many keys: sluice eventual, its syncer
// running, against the fastest local peer and the floor behind the API on
// every key set, with the spread of the runs. What runs beside the checks
// (writeBeside) is on the detail page.
func (r *Report) writeManyKeys(p printer) {
	any := false
	for _, set := range sets {
		if _, ok := r.nsSpread(set, "allow", "sluice-eventual", "serial"); ok {
			any = true
		}
	}
	if !any {
		return
	}
	p("## Many keys: sluice eventual with its syncer running\n\n")
	p("*sluice eventual* here is the default configuration with its syncer running against the benchmark's Redis during the loop (100 ms SyncInterval). Cells: median (min–max) ns per check over the runs; ratios are of medians, and in brackets the worst and best case over the runs (slowest sluice against fastest peer, and the reverse). Targets: sluice eventual faster than the fastest local peer by ≥ 1.5× on the hot key and 10k keys, ≥ 1.2× on the 1M-key and churn sets; within 1.3× of the floor behind the API on the hot key and 10k keys.\n\n")
	r.writeScorecard(p, false)
	if _, ok := r.nsSpread("hot", "allow", "sluice-eventual", "serial", true); ok {
		p("\nThe same with the CPU time of the loop goroutines per check (`loop-cpu-ns/op`: their threads' `RUSAGE_THREAD` time over the checks), which leaves out the time they waited for a core: on a machine busy with other work, closer to what a check costs than wall time.\n\n")
		r.writeScorecard(p, true)
	}
}

// writeScorecard writes the table of sluice eventual against the fastest
// local peer and the floors, in wall time or (cpu) the loop's CPU time.
func (r *Report) writeScorecard(p printer, cpu bool) {
	p("| key set | mode | sluice eventual | fastest local peer | peer ÷ sluice | target | floor behind the API | sluice ÷ floor behind the API | floor |\n|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, set := range sets {
		for _, mode := range modes {
			sl, ok := r.nsSpread(set, "allow", "sluice-eventual", mode, cpu)
			if !ok {
				continue
			}
			peer, name, okp := r.fastestPeerSpread(set, "allow", mode, cpu)
			api, oka := r.nsSpread(set, "allow", "floor-api", mode, cpu)
			fl, okf := r.nsSpread(set, "allow", "floor", mode, cpu)
			need := 1.2
			if set == "hot" || set == "10k" {
				need = 1.5
			}
			vs := "—"
			if okp {
				x := peer.Median / sl.Median
				vs = fmt.Sprintf("%s [%s–%s] %s", fmtRatio(x, true), fmtRatio(peer.Min/sl.Max, true), fmtRatio(peer.Max/sl.Min, true), verdict(x >= need, true))
			}
			apiCell, apiRatio := "—", "—"
			if oka {
				apiCell = api.fmtDur()
				x := sl.Median / api.Median
				apiRatio = fmtRatio(x, true)
				if need == 1.5 {
					apiRatio += " " + verdict(x <= 1.3, true)
				}
			}
			flCell := "—"
			if okf {
				flCell = fl.fmtDur()
			}
			peerCell := "—"
			if okp {
				peerCell = peer.fmtDur() + " " + name
			}
			p("| %s | %s | %s | %s | %s | ≥ %.1f× | %s | %s | %s |\n", setNames[set], mode, sl.fmtDur(), peerCell, vs, need, apiCell, apiRatio, flCell)
		}
	}
}

// writeBeside writes what the process spends beside the timed loops, for
// the detail page.
func (r *Report) writeBeside(p printer) {
	measured := false
	for _, set := range sets {
		for _, mode := range modes {
			if _, ok := r.Data.Spread(checkName("Check", set, "allow", "sluice-eventual", mode), "bg-cpu-ms/s", 1); ok {
				measured = true
			}
		}
	}
	if !measured {
		return
	}
	p("## What runs beside the checks\n\n")
	p("CPU time the process spends besides its timed loops, per second of the loop's wall time (ms/s; 1000 = one core): the process's CPU time (`getrusage(RUSAGE_SELF)`) minus the loop goroutines' own, each locked to its OS thread for the loop (`RUSAGE_THREAD`). It holds the limiter's background goroutines, the garbage collector and the Go runtime. *The syncer's own CPU* is sluice eventual's figure minus that of the same rule with an idle syncer (SyncInterval 1h), which has the same ticker and sweeper. For sluice eventual also the key-syncs its syncer made per second of the loop (`Stats().Sync.KeySyncs`) and the CPU time Redis spent meanwhile (INFO `used_cpu_user + used_cpu_sys`). Median (min–max) over the runs.\n\n")
	p("*GC* is the Go runtime's estimate of its garbage collector's CPU time over the loop of sluice eventual (`/cpu/classes/gc/total:cpu-seconds`), counted in the first column or, for mark assists, in the loop's own time.\n\n")
	p("| key set | mode | eventual | eventual, idle syncer | the syncer's own (median difference) | local | floor | eventual: GC | key-syncs/s | Redis CPU ms/s |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, set := range sets {
		for _, mode := range modes {
			ev, ok := r.Data.Spread(checkName("Check", set, "allow", "sluice-eventual", mode), "bg-cpu-ms/s", 1)
			if !ok {
				continue
			}
			cell := func(lib string) string {
				if s, ok := r.Data.Spread(checkName("Check", set, "allow", lib, mode), "bg-cpu-ms/s", 1); ok {
					return s.fmtNum("%.0f")
				}
				return "—"
			}
			own := "—"
			if idle, ok := r.Data.Spread(checkName("Check", set, "allow", "sluice-eventual-idle", mode), "bg-cpu-ms/s", 1); ok {
				own = fmt.Sprintf("%.0f", ev.Median-idle.Median)
			}
			ks, rc, gc := "—", "—", "—"
			if s, ok := r.Data.Spread(checkName("Check", set, "allow", "sluice-eventual", mode), "gc-cpu-ms/s", 1); ok {
				gc = s.fmtNum("%.0f")
			}
			if s, ok := r.Data.Spread(checkName("Check", set, "allow", "sluice-eventual", mode), "keysyncs/s", 1); ok {
				ks = s.fmtNum("%.0f")
			}
			if s, ok := r.Data.Spread(checkName("Check", set, "allow", "sluice-eventual", mode), "redis-cpu-ms/s", 1); ok {
				rc = s.fmtNum("%.0f")
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", setNames[set], mode, ev.fmtNum("%.0f"), cell("sluice-eventual-idle"), own, cell("sluice-local"), cell("floor"), gc, ks, rc)
		}
	}
	p("\n")
}
