package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/sluicehq/sluice/benchmarks
cpu: Test CPU
BenchmarkCheck/set=hot/path=allow/lib=floor/mode=serial-2 	100	10.0 ns/op	0 B/op	0 allocs/op
BenchmarkCheck/set=hot/path=allow/lib=floor/mode=serial-2 	100	12.0 ns/op	0 B/op	0 allocs/op
BenchmarkCheck/set=hot/path=allow/lib=floor-api/mode=serial-2 	100	20.0 ns/op	0 B/op	0 allocs/op
BenchmarkCheck/set=hot/path=allow/lib=sluice-eventual/mode=serial-2 	100	11.0 ns/op	0 B/op	0 allocs/op
BenchmarkCheck/set=hot/path=allow/lib=sluice-eventual/mode=serial-2 	100	13.0 ns/op	0 B/op	0 allocs/op
BenchmarkCheck/set=hot/path=allow/lib=sethvargo/mode=serial-2 	100	70.0 ns/op	0 B/op	0 allocs/op
BenchmarkCheck/set=hot/path=deny/lib=sluice-eventual-idle/mode=serial-2 	100	200 ns/op	0 B/op	0 allocs/op
BenchmarkCheck/set=1M-zipf1.0/path=allow/lib=sluice-eventual/mode=serial-2 	100	200 ns/op	30 bg-cpu-ms/s	9000 keysyncs/s	50 redis-cpu-ms/s	0 B/op	0 allocs/op
BenchmarkCheck/set=1M-zipf1.0/path=allow/lib=sluice-eventual/mode=serial-2 	100	220 ns/op	50 bg-cpu-ms/s	9000 keysyncs/s	50 redis-cpu-ms/s	0 B/op	0 allocs/op
BenchmarkCheck/set=1M-zipf1.0/path=allow/lib=sluice-eventual/mode=serial-2 	100	300 ns/op	60 bg-cpu-ms/s	9000 keysyncs/s	50 redis-cpu-ms/s	0 B/op	0 allocs/op
BenchmarkCheck/set=1M-zipf1.0/path=allow/lib=sluice-eventual-idle/mode=serial-2 	100	200 ns/op	10 bg-cpu-ms/s	0 B/op	0 allocs/op
BenchmarkCheck/set=1M-zipf1.0/path=allow/lib=sethvargo/mode=serial-2 	100	330 ns/op	5 bg-cpu-ms/s	0 B/op	0 allocs/op
BenchmarkCheckRemote/set=hot/path=allow/lib=redis_rate/mode=serial-2 	100	40000 ns/op	700 B/op	22 allocs/op
BenchmarkSync/dirty=10k-2 	7	169442882 ns/op	345.1 bytes/keysync	1.000 cmds/keysync	10000 keysyncs/cycle	59017 keysyncs/s	201.3 redis-B/key	6.001 redis-cmds/keysync	41.00 roundtrips/cycle
BenchmarkRedisINCR/P=64-2 	1	837604234 ns/op	1278944 ops/s
BenchmarkTelemetry/set=hot/tel=off/mode=serial-2 	100	20.0 ns/op	0 B/op	0 allocs/op
BenchmarkTelemetry/set=hot/tel=global/mode=serial-2 	100	20.5 ns/op	0 B/op	0 allocs/op
BenchmarkTelemetry/set=hot/tel=sdk/mode=serial-2 	100	20.8 ns/op	0 B/op	0 allocs/op
BenchmarkMemory/lib=sluice-local-2 	1	1000 ns/op	300 heapalloc-B/key	310 heapinuse-B/key	16 key-B/key
--- BENCH: BenchmarkRedisINCR/P=64-2
    sync_test.go:149: INCR: 1912045.88 requests per second, p50=1.383 msec
`

func TestReport(t *testing.T) {
	d, err := Parse(strings.NewReader(sample), "sample")
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Get("Check/set=hot/path=allow/lib=floor/mode=serial", "sec/op"); !s.OK || s.N != 2 || math.Abs(s.Median-11e-9) > 1e-15 {
		t.Fatalf("floor: %+v", s)
	}
	r := &Report{Data: d, Meta: map[string]string{"date": "today", "CPU": "Test CPU"}, Dist: []string{"slope -1.1"}}
	var buf bytes.Buffer
	r.Write(&buf)
	doc := buf.String()
	for _, want := range []string{
		"| 1 hot key | serial | 11.0 ns |", // floor median
		"5.83× (sethvargo)",                // 70/12: peer ÷ sluice
		"3333×",                            // redis_rate ÷ sluice: 40000/12
		"169 ms",                           // 10k cycle
		"| 10k | 4.6% |",                   // 59017 / 1278944
		"300 B with its 16-B key copy, 284 B without", // memory target
		"| Test CPU |",
		"dirty keys per 100 ms interval",
		"they never overlap and nothing is lost",
		"slope -1.1",
		"| 1 hot key | serial | 1.82× | 0.60× |", // floor-api ÷ floor (20/11), eventual ÷ floor-api (12/20)
		"| 1 hot key | serial | 20.0 ns | 20.5 ns | 20.8 ns | 1.04× | 0, 0, 0 |", // telemetry cost
		"hot serial 1.04×; at most 0 allocs/op | **met** |",
		"| 1M keys, Zipf 1.0 | serial | 220 ns (200 ns–300 ns) | 330 ns (330 ns–330 ns) sethvargo | 1.50× [1.10×–1.65×] **met** | ≥ 1.2× |", // min/median/max
		"| 1M keys, Zipf 1.0 | serial | 50 (30–60) | 10 (10–10) | 40 |",                                                                     // bg CPU, the syncer's own // floor-api ÷ floor (20/11), eventual ÷ floor-api (12/20)
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// The measurements sit between the markers docs_test.go looks for.
	if !strings.HasPrefix(doc, "# sluice performance\n\n"+generatedBegin+"\n\n") || !strings.HasSuffix(doc, "\n\n"+generatedEnd+"\n") {
		t.Errorf("the report is not between the generated markers: begins %q, ends %q", doc[:min(80, len(doc))], doc[max(0, len(doc)-80):])
	}
	memory, setup := strings.Index(doc, "## Memory"), strings.Index(doc, "## Setup")
	if memory < 0 || setup < 0 || memory > setup {
		t.Errorf("the memory table comes before the setup (at %d, setup at %d)", memory, setup)
	}
	// The page describes the project as it is: no history, no issue numbers.
	for _, banned := range []string{"What was tried", "tried", "issue"} {
		if strings.Contains(doc, banned) {
			t.Errorf("report says %q; history belongs in benchmarks/HISTORY.md", banned)
		}
	}
	if t.Failed() {
		t.Log(doc)
	}
}

// TestBenchstatPage: with a page for benchstat's output, the report links to
// it and the page holds the output; without one, the report includes it.
func TestBenchstatPage(t *testing.T) {
	t.Parallel()
	const out = "Check/set=hot/path=allow/lib=floor/mode=serial-2   11.13n ±  5%"
	for _, tc := range []struct {
		page           string
		inReport, link bool
	}{
		{page: "../benchmarks/benchstat.md", link: true},
		{page: "", inReport: true},
	} {
		r := &Report{Data: Data{}, Meta: map[string]string{"date": "today"}, Benchstat: out + "\n", BenchstatPage: tc.page, ReportPage: "../docs/performance.md"}
		var doc bytes.Buffer
		r.Write(&doc)
		if got := strings.Contains(doc.String(), out); got != tc.inReport {
			t.Errorf("page %q: the report includes benchstat's output: %v, want %v", tc.page, got, tc.inReport)
		}
		if got := strings.Contains(doc.String(), "[benchstat.md](../benchmarks/benchstat.md)"); got != tc.link {
			t.Errorf("page %q: the report links to the page: %v, want %v", tc.page, got, tc.link)
		}
		if tc.page == "" {
			continue
		}
		var page bytes.Buffer
		r.WriteBenchstat(&page)
		if !strings.Contains(page.String(), out) || !strings.Contains(page.String(), "[../docs/performance.md](../docs/performance.md)") {
			t.Errorf("the benchstat page lacks the output or its link back:\n%s", page.String())
		}
	}
}

// TestSyncPage: with a page for the sync tables, the report links to it in
// place of the section and the page holds the tables, with a link back;
// without one, the report includes them (TestReport).
func TestSyncPage(t *testing.T) {
	t.Parallel()
	d, err := Parse(strings.NewReader(sample), "sample")
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{Data: d, Meta: map[string]string{"date": "today", "mode": "quick"}, SyncPage: "performance-sync.md", SyncBack: "performance.md"}
	var doc, page bytes.Buffer
	r.Write(&doc)
	r.WriteSync(&page)
	tables := []string{
		"| dirty keys per cycle | cycle latency (Flush) |",
		"| 10k | 4.6% |", // 59017 / 1278944
		"dirty keys per 100 ms interval",
		"they never overlap and nothing is lost",
	}
	for _, want := range tables {
		if strings.Contains(doc.String(), want) {
			t.Errorf("the report still holds %q, which belongs on the sync page", want)
		}
	}
	for _, want := range append(tables, "| 10k | 169 ms |") { // 10k cycle (the targets cite it too)
		if !strings.Contains(page.String(), want) {
			t.Errorf("the sync page lacks %q", want)
		}
	}
	for _, want := range []string{"## Sync against a real Redis", "[performance-sync.md](performance-sync.md)", "## Memory per tracked key"} {
		if !strings.Contains(doc.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	for _, want := range []string{"# sluice performance: sync against a real Redis", "`benchmarks/run.sh -quick` on today", "[performance.md](performance.md)"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("the sync page lacks %q", want)
		}
	}
	for _, banned := range []string{"tried", "issue"} {
		if strings.Contains(page.String(), banned) {
			t.Errorf("the sync page says %q; history belongs in benchmarks/HISTORY.md", banned)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s\nsync page:\n%s", doc.String(), page.String())
	}
}

// TestDetailPage: with DetailPage set, the per-key tables, the ratios, the
// algorithms, the telemetry cost, what runs beside the checks and the setup
// go to their own page, and the report keeps the targets, the many-keys
// table and the machine.
func TestDetailPage(t *testing.T) {
	t.Parallel()
	d, err := Parse(strings.NewReader(sample), "sample")
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{Data: d, Meta: map[string]string{"date": "today", "CPU": "Test CPU"},
		DetailPage: "../benchmarks/performance-detail.md", DetailBack: "../docs/performance.md"}
	var doc, page bytes.Buffer
	r.Write(&doc)
	r.WriteDetail(&page)
	moved := []string{"## Per-key check: allow path", "## What runs beside the checks", "## Ratios (same run)", "## Telemetry cost", "## Setup",
		"| 1 hot key | serial | 1.82× | 0.60× |", "| 1 hot key | serial | 20.0 ns | 20.5 ns | 20.8 ns | 1.04× | 0, 0, 0 |"}
	for _, want := range moved {
		if strings.Contains(doc.String(), want) {
			t.Errorf("the report still holds %q, which belongs on the detail page", want)
		}
		if !strings.Contains(page.String(), want) {
			t.Errorf("the detail page lacks %q", want)
		}
	}
	for _, want := range []string{"## Targets", "## Many keys", "## Memory per tracked key", "| Test CPU |",
		"[performance-detail.md](../benchmarks/performance-detail.md)"} {
		if !strings.Contains(doc.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	for _, want := range []string{"# sluice performance: the whole run", "[performance.md](../docs/performance.md)"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("the detail page lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s\ndetail page:\n%s", doc.String(), page.String())
	}
}

// TestWithTail: a regenerated report keeps what followed the generated
// block on the page it replaces, and only that.
func TestWithTail(t *testing.T) {
	t.Parallel()
	page := "# sluice performance\n\n" + generatedBegin + "\n\nnew\n\n" + generatedEnd + "\n"
	for _, tc := range []struct {
		name, old, want string
	}{
		{"no page yet", "", page},
		{"nothing after the block", "# sluice performance\n\n" + generatedBegin + "\n\nold\n\n" + generatedEnd + "\n", page},
		{"a section after the block", "# sluice performance\n\n" + generatedBegin + "\n\nold\n\n" + generatedEnd + "\n\n## The key map\n\nkept\n",
			page + "\n## The key map\n\nkept\n"},
		{"no block: nothing kept", "# hand-written\n\nold\n", page},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := string(withTail([]byte(page), []byte(tc.old))); got != tc.want {
				t.Errorf("withTail:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}
