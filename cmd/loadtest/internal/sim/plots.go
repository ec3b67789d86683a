package sim

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/report"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/traffic"
)

// boundaryPlot plots what each algorithm admitted in the sliding window over
// the first attack cycles, for one attacked key.
func boundaryPlot(cfg Config, runs []run, file string) error {
	w := cfg.Rule.Window
	l := float64(cfg.Rule.Limit)
	from, to := int64(0), int64(min(cfg.Duration, 7*w))
	step := max(w/600, time.Microsecond)
	c := report.Chart{
		Title:  fmt.Sprintf("Boundary attack (%s): admitted in the last W, key k0", cfg.RuleText),
		XLabel: "time (s)",
		YLabel: "admitted in (t−W, t]",
	}
	var exact *report.Line
	i := 0
	for _, r := range runs {
		b := r.a.Geo.Buckets()
		if !(r.a.Geo.Span() == 1 || b == 1 || b == 10 || b == 60) {
			continue
		}
		s, ok := r.an.Series(0, from, to, step)
		if !ok {
			continue
		}
		if exact == nil {
			exact = &report.Line{Name: "exact sliding log", X: s.T, Y: s.Exact, Color: report.Palette(7), Width: 2}
		}
		line := report.Line{Name: r.a.Name, X: s.T, Y: s.Fleet, Color: report.Palette(i)}
		if i%2 == 1 {
			line.Dashes = report.Dashed
		}
		c.Lines = append(c.Lines, line)
		i++
	}
	if exact == nil {
		return nil
	}
	c.Lines = append([]report.Line{*exact}, c.Lines...)
	c.Lines = append(c.Lines, report.Line{Name: "L", X: []float64{exact.X[0], exact.X[len(exact.X)-1]}, Y: []float64{l, l}, Color: report.Palette(3), Dashes: report.Dotted})
	c.YMin, c.YMax = 0, 2.7*l
	return c.Save(file)
}

// sweepPlot plots over-admission (max and p99 over keys) against B for the
// two default profiles, with the fixed window as a reference line.
func sweepPlot(cfg Config, profiles []string, rows [][]float64, file string) error {
	bs := sweepBs(cfg.Rule.Window)
	xs := make([]float64, len(bs))
	for i, b := range bs {
		xs[i] = float64(b)
	}
	c := report.Chart{
		Title:  fmt.Sprintf("Algorithm error against sub-windows B (%s)", cfg.RuleText),
		XLabel: "sub-windows B (log scale)",
		YLabel: "over-admission, % of L",
		LogX:   true,
	}
	for pi, prof := range profiles {
		row := rows[pi]
		var mx, p99 []float64
		for i := range bs {
			mx = append(mx, 100*row[3*i])
			p99 = append(p99, 100*row[3*i+1])
		}
		name := prof
		if prof == traffic.Steady {
			name = "Poisson"
		}
		fixed := 100 * row[3*len(bs)]
		c.Lines = append(c.Lines,
			report.Line{Name: name + ": max over keys", X: xs, Y: mx, Color: report.Palette(pi), Points: true},
			report.Line{Name: name + ": p99 over keys", X: xs, Y: p99, Color: report.Palette(pi), Dashes: report.Dashed, Points: true},
			report.Line{Name: fmt.Sprintf("%s: fixed window (max %.0f%%)", name, fixed), X: []float64{xs[0], xs[len(xs)-1]}, Y: []float64{fixed, fixed}, Color: report.Palette(pi), Dashes: report.Dotted},
		)
	}
	c.YMin, c.YMax = 0, 150
	return c.Save(filepath.Clean(file))
}
