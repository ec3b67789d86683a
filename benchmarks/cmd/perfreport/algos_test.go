package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

const algoSample = `goos: linux
goarch: amd64
pkg: github.com/sluicehq/sluice/benchmarks
cpu: Test CPU
BenchmarkAlgorithms/set=hot/path=allow/algo=floor/mode=serial-2 	100	10.0 ns/op	0 B/op	0 allocs/op
BenchmarkAlgorithms/set=hot/path=allow/algo=floor/mode=serial-2 	100	12.0 ns/op	0 B/op	0 allocs/op
BenchmarkAlgorithms/set=hot/path=allow/algo=sliding/mode=serial-2 	100	20.0 ns/op	0 B/op	0 allocs/op
BenchmarkAlgorithms/set=hot/path=allow/algo=sliding/mode=serial-2 	100	22.0 ns/op	0 B/op	0 allocs/op
BenchmarkAlgorithms/set=hot/path=allow/algo=gcra/mode=serial-2 	100	24.0 ns/op	0 B/op	0 allocs/op
BenchmarkAlgorithms/set=hot/path=allow/algo=gcra/mode=serial-2 	100	26.0 ns/op	0 B/op	0 allocs/op
BenchmarkAlgorithms/set=hot/path=allow/algo=gcra/mode=parallel-2 	100	30.0 ns/op	0 B/op	0 allocs/op
BenchmarkAlgorithms/set=hot/path=deny/algo=sliding/mode=serial-2 	100	20.0 ns/op	0 B/op	0 allocs/op
BenchmarkAlgorithms/set=hot/path=deny/algo=log/mode=serial-2 	100	40.0 ns/op	0 B/op	1 allocs/op
BenchmarkCheck/set=hot/path=allow/lib=sluice-eventual-idle/mode=serial-2 	100	23.1 ns/op	0 B/op	0 allocs/op
`

// TestAlgorithms: the Algorithms table has a row per measured algorithm,
// with the median (min–max), the ratios to the sliding window and the
// floor of the same run, the allocations, and the verdicts.
func TestAlgorithms(t *testing.T) {
	t.Parallel()
	d, err := Parse(strings.NewReader(algoSample), "sample")
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{Data: d, Meta: map[string]string{"count_algos": "2"}}
	var buf bytes.Buffer
	r.writeAlgorithms(func(format string, args ...any) { fmt.Fprintf(&buf, format, args...) })
	doc := buf.String()
	for _, want := range []string{
		"## Algorithms",
		"over 2 runs",
		"| 1 hot key | allow | SlidingWindow (default) | 21.0 ns (20.0 ns–22.0 ns) | 1.00× | 1.91× | — | — | — | 0 |",
		"| 1 hot key | allow | GCRA | 25.0 ns (24.0 ns–26.0 ns) | 1.19× | 2.27× | 30.0 ns (30.0 ns–30.0 ns) | — | — | 0 |",
		"| 1 hot key | deny | SlidingLog | 40.0 ns (40.0 ns–40.0 ns) | 2.00× | 3.64× | — | — | — | 1 |",
		"| 1 hot key | allow | *SlidingWindow, Eventual, idle syncer (BenchmarkCheck; deny: Limit 2)* | 23.1 ns (23.1 ns–23.1 ns) | 1.10× | 2.10× |",
		"at most 1 allocs/op, **missed**",
		"worst 2.00× (SlidingLog, 1 hot key, deny path, serial), **missed**",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if strings.Contains(doc, "WeightedWindow |") {
		t.Error("a row for an algorithm that was not measured")
	}
	if t.Failed() {
		t.Log(doc)
	}
}

// TestAlgorithmsAbsent: without BenchmarkAlgorithms results there is no
// section.
func TestAlgorithmsAbsent(t *testing.T) {
	t.Parallel()
	r := &Report{Data: Data{}, Meta: map[string]string{}}
	var buf bytes.Buffer
	r.writeAlgorithms(func(format string, args ...any) { fmt.Fprintf(&buf, format, args...) })
	if buf.Len() != 0 {
		t.Errorf("a section without results: %q", buf.String())
	}
}
