package main

import (
	"fmt"
	"math"
	"strings"
)

// The layout of the Algorithms table (BenchmarkAlgorithms): its key sets,
// and its algorithms with their titles, in order.
var (
	algoSets  = []string{"hot", "10k"}
	algoOrder = []struct{ algo, title string }{
		{"sliding", "SlidingWindow (default)"},
		{"weighted", "WeightedWindow"},
		{"fixed", "FixedWindow"},
		{"tokenbucket", "TokenBucket"},
		{"gcra", "GCRA"},
		{"warmup", "GCRA with WarmUp"},
		{"log", "SlidingLog"},
	}
)

// algoTarget is the project's bound on every algorithm's check: at most this
// many times the sliding window's, in the same run.
const algoTarget = 1.5

func algoName(set, path, algo, mode string) string {
	return fmt.Sprintf("Algorithms/set=%s/path=%s/algo=%s/mode=%s", set, path, algo, mode)
}

// algoNs is the spread of ns per check of one cell of the Algorithms
// table.
func (r *Report) algoNs(set, path, algo, mode string) (Spread, bool) {
	return r.Data.Spread(algoName(set, path, algo, mode), "sec/op", 1e9)
}

// algoWorst returns, over every measured cell, the largest ratio of an
// algorithm's median to the sliding window's (same set, path and mode) and
// where it is, the most allocs/op, and whether anything was measured.
func (r *Report) algoWorst() (worst float64, where string, allocs float64, known bool) {
	for _, set := range algoSets {
		for _, path := range []string{"allow", "deny"} {
			for _, mode := range modes {
				sl, okS := r.algoNs(set, path, "sliding", mode)
				for _, a := range algoOrder {
					s, ok := r.algoNs(set, path, a.algo, mode)
					if !ok {
						continue
					}
					known = true
					if al := r.Data.Get(algoName(set, path, a.algo, mode), "allocs/op"); al.OK {
						allocs = math.Max(allocs, al.Median)
					}
					if okS && s.Median/sl.Median > worst {
						worst, where = s.Median/sl.Median, fmt.Sprintf("%s, %s, %s path, %s", a.title, setNames[set], path, mode)
					}
				}
			}
		}
	}
	return worst, where, allocs, known
}

// writeAlgorithms writes every algorithm's check next to the sliding window
// and the floor, from BenchmarkAlgorithms (and, for reference, the eventual
// sliding window of BenchmarkCheck, same run).
func (r *Report) writeAlgorithms(p printer) {
	worst, where, allocs, known := r.algoWorst()
	if !known {
		return
	}
	p("## Algorithms\n\n")
	p("`Limiter.Allow` for a Local rule of each algorithm, beside the floor (the same map load and atomic add as above) in the same process (`BenchmarkAlgorithms`). Every rule is decided on the published time: a per-key algorithm whose interval Window/Limit is under 10 ms reads the clock on every check instead, which adds what `time.Now()` costs (see the allow-path table). Rules: the windows, Limit `policy.MaxLimit` per hour; TokenBucket and GCRA, 360000 per hour (10 ms) with a Burst of 3·10⁹; GCRA with WarmUp, the same rate with a WarmUp of 1 min and a Burst of 8.64·10⁶ (a day of intervals, the most a warm-up rule may have), its keys filled past their stored permits so that they are measured warm; SlidingLog, 100 per minute. *Allow path*: every check admits. *Deny path*: every check denies (windows and log 100 per minute, each key filled with its whole limit; warm-up, each key filled with its whole burst). A WarmUp cannot admit a hot key for a whole run (it admits at most its Burst at once, then one per interval) and a SlidingLog at most its Limit per window, so those are measured on the deny path only.\n\n")
	p("Cells: median (min–max) ns per check over %s runs; ratios are of medians, to the sliding window on the same key set, path and mode, and to the floor on the same key set and mode (the floor has no deny path: its allow path). allocs/op: the largest median over the modes.\n\n", orDash(r.Meta["count_algos"]))
	verdictText := fmt.Sprintf("worst %s (%s)", fmtRatio(worst, where != ""), orDash(where))
	p("**Target:** every algorithm's Allow is 0 allocs: at most %.0f allocs/op, %s; none is more than %.1f× the sliding window's time: %s, %s.\n\n", allocs, verdict(allocs == 0, true), algoTarget, verdictText, verdict(worst <= algoTarget, where != ""))
	p("| key set | path | algorithm | serial | ÷ sliding | ÷ floor | parallel | ÷ sliding | ÷ floor | allocs/op |\n|---|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, set := range algoSets {
		for _, path := range []string{"allow", "deny"} {
			for _, a := range algoOrder {
				r.writeAlgoRow(p, set, path, a.algo, a.title)
			}
			r.writeEventualRow(p, set, path)
		}
	}
	p("\n")
}

// writeAlgoRow writes one algorithm's row, if it was measured.
func (r *Report) writeAlgoRow(p printer, set, path, algo, title string) {
	var cells []string
	measured := false
	allocs := math.Inf(-1)
	for _, mode := range modes {
		s, ok := r.algoNs(set, path, algo, mode)
		if !ok {
			cells = append(cells, "—", "—", "—")
			continue
		}
		measured = true
		cells = append(cells, s.fmtDur(), r.algoRatio(s, set, path, "sliding", mode), r.algoRatio(s, set, "allow", "floor", mode))
		if al := r.Data.Get(algoName(set, path, algo, mode), "allocs/op"); al.OK {
			allocs = math.Max(allocs, al.Median)
		}
	}
	if !measured {
		return
	}
	al := "—"
	if !math.IsInf(allocs, -1) {
		al = fmt.Sprintf("%.0f", allocs)
	}
	p("| %s | %s | %s | %s | %s |\n", setNames[set], path, title, strings.Join(cells, " | "), al)
}

// algoRatio is s's median over that of algo's cell (same set and mode), as
// text.
func (r *Report) algoRatio(s Spread, set, path, algo, mode string) string {
	ref, ok := r.algoNs(set, path, algo, mode)
	if !ok || ref.Median == 0 {
		return "—"
	}
	return fmtRatio(s.Median/ref.Median, true)
}

// writeEventualRow writes, for reference, sluice eventual's sliding window
// with an idle syncer (BenchmarkCheck, the same run) against this table's
// sliding window and floor.
func (r *Report) writeEventualRow(p printer, set, path string) {
	var cells []string
	measured := false
	for _, mode := range modes {
		s, ok := r.nsSpread(set, path, "sluice-eventual-idle", mode)
		if !ok {
			cells = append(cells, "—", "—", "—")
			continue
		}
		measured = true
		cells = append(cells, s.fmtDur(), r.algoRatio(s, set, path, "sliding", mode), r.algoRatio(s, set, "allow", "floor", mode))
	}
	if measured {
		p("| %s | %s | *SlidingWindow, Eventual, idle syncer (BenchmarkCheck; deny: Limit 2)* | %s | — |\n", setNames[set], path, strings.Join(cells, " | "))
	}
}
