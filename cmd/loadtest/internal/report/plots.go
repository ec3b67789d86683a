package report

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Ext is the plots' file extension, which picks the format: ".svg" (the
// default) or ".png".
var Ext = ".svg"

// Line is one named series of a plot.
type Line struct {
	Name   string
	X, Y   []float64
	Color  color.Color // nil: by position
	Dashes []vg.Length
	Width  vg.Length // 0: 1pt
	Points bool      // draw markers too
}

// Chart is a simple line chart.
type Chart struct {
	Title, XLabel, YLabel string
	Lines                 []Line
	LogX, LogY            bool
	YMin, YMax            float64 // both 0: automatic
	Width, Height         vg.Length
}

var (
	grey  = color.RGBA{150, 150, 150, 255}
	black = color.RGBA{0, 0, 0, 255}
	red   = color.RGBA{200, 30, 30, 255}
	blue  = color.RGBA{31, 100, 180, 255}
	amber = color.RGBA{230, 130, 20, 255}
	green = color.RGBA{40, 150, 60, 255}
)

// Palette returns a distinct color for series i.
func Palette(i int) color.Color {
	cs := []color.Color{blue, amber, green, red, color.RGBA{130, 60, 170, 255}, color.RGBA{20, 160, 170, 255}, color.RGBA{140, 90, 40, 255}, black}
	return cs[i%len(cs)]
}

// Save renders the chart to file (SVG or PNG by extension).
func (c *Chart) Save(file string) error {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	if c.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	for i, l := range c.Lines {
		xys := make(plotter.XYs, 0, len(l.X))
		for j := range l.X {
			y := l.Y[j]
			if math.IsNaN(y) || math.IsInf(y, 0) || (c.LogY && y <= 0) || (c.LogX && l.X[j] <= 0) {
				continue
			}
			xys = append(xys, plotter.XY{X: l.X[j], Y: y})
		}
		if len(xys) == 0 {
			continue
		}
		ln, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		col := l.Color
		if col == nil {
			col = Palette(i)
		}
		ln.Color = col
		ln.Width = vg.Points(1)
		if l.Width > 0 {
			ln.Width = l.Width
		}
		ln.Dashes = l.Dashes
		p.Add(ln)
		if l.Points {
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return err
			}
			sc.Color = col
			sc.Shape = draw.CircleGlyph{}
			sc.Radius = vg.Points(2.5)
			p.Add(sc)
			p.Legend.Add(l.Name, ln, sc)
		} else {
			p.Legend.Add(l.Name, ln)
		}
	}
	if c.YMin != 0 || c.YMax != 0 {
		p.Y.Min, p.Y.Max = c.YMin, c.YMax
	}
	w, h := c.Width, c.Height
	if w == 0 {
		w = 8 * vg.Inch
	}
	if h == 0 {
		h = 4 * vg.Inch
	}
	return p.Save(w, h, file)
}

// Dashed and Dotted are line styles.
var (
	Dashed = []vg.Length{vg.Points(6), vg.Points(3)}
	Dotted = []vg.Length{vg.Points(2), vg.Points(2)}
	dashed = Dashed
	dotted = Dotted
)

// constLine is a horizontal line over xs' range.
func constLine(name string, xs []float64, y float64, col color.Color, dash []vg.Length) Line {
	if len(xs) == 0 {
		return Line{Name: name}
	}
	return Line{Name: name, X: []float64{xs[0], xs[len(xs)-1]}, Y: []float64{y, y}, Color: col, Dashes: dash}
}

// WindowPlot plots, for the scenario's plotted key, what was admitted in the
// sliding window (t−W, t] over time by the fleet, by the same algorithm run
// centrally and by the exact sliding log, against L and L·(1+ε).
func WindowPlot(file string, s *Scenario) error {
	if s.Series == nil || len(s.Series.T) == 0 {
		return nil
	}
	st := s.Settings
	l := float64(st.Limit)
	ser := s.Series
	top := l * 1.1
	for _, y := range ser.Fleet {
		top = max(top, y)
	}
	for _, y := range ser.Central {
		top = max(top, y)
	}
	top *= 1.4 // room for the legend
	c := Chart{
		Title:  fmt.Sprintf("%s: admitted in the last W for key k%d (%s, %d instances, sync %v, ε=%s)", label(s), s.SeriesKey, st.Rule, st.Instances, st.SyncInterval, pct(st.ErrorBudget)),
		XLabel: "time (s)",
		YLabel: "admitted in (t−W, t]",
		YMin:   0, YMax: top,
		Lines: []Line{
			{Name: "offered", X: ser.T, Y: ser.Offered, Color: color.RGBA{200, 200, 200, 255}, Dashes: dotted},
			{Name: "exact sliding log", X: ser.T, Y: ser.Exact, Color: grey, Width: vg.Points(2)},
			{Name: "same algorithm, central", X: ser.T, Y: ser.Central, Color: amber, Dashes: dashed},
			{Name: "fleet", X: ser.T, Y: ser.Fleet, Color: blue},
			constLine("L", ser.T, l, black, dashed),
			constLine("L(1+ε)", ser.T, l*(1+st.ErrorBudget), red, dotted),
		},
	}
	return c.Save(file)
}

// SweepPlots writes sweep-<param>-accuracy.svg and sweep-<param>-cost.svg.
func SweepPlots(dir, param string, xs []float64, profiles []string, ss []Scenario) error {
	xl := map[string]string{"sync": "sync interval (ms)", "budget": "error budget ε (%)", "instances": "instances", "precision": "sub-windows B", "rate": "offered checks/s", "keys": "keys"}[param]
	logX := param == "sync" || param == "budget" || param == "rate" || param == "keys"
	acc := Chart{Title: "Fleet over-admission against " + xl, XLabel: xl, YLabel: "over-admission (% of L)"}
	cost := Chart{Title: "Sync cost against " + xl, XLabel: xl, YLabel: "per instance per second", LogY: true}
	acc.LogX, cost.LogX = logX, logX
	var eps []float64
	for pi, prof := range profiles {
		var est, exc, urg, cmd, rt []float64
		for i := range xs {
			s := find(ss, prof, i, len(profiles))
			if s == nil {
				est, exc, urg, cmd, rt = append(est, math.NaN()), append(exc, math.NaN()), append(urg, math.NaN()), append(cmd, math.NaN()), append(rt, math.NaN())
				continue
			}
			if pi == 0 {
				eps = append(eps, 100*s.Settings.ErrorBudget)
			}
			est = append(est, 100*s.Accuracy.EstimateOverMax)
			exc = append(exc, 100*s.Accuracy.ExcessMax)
			urg = append(urg, s.Cost.UrgentPerSec)
			cmd = append(cmd, s.Cost.CommandsPerSec)
			rt = append(rt, s.Cost.RoundTripsPerSec)
		}
		col := Palette(pi)
		acc.Lines = append(acc.Lines,
			Line{Name: prof + ": in the algorithm's estimate", X: xs, Y: est, Color: col, Points: true},
			Line{Name: prof + ": exact, beyond the algorithm's own", X: xs, Y: exc, Color: col, Dashes: dashed, Points: true})
		cost.Lines = append(cost.Lines,
			Line{Name: prof + ": Redis commands", X: xs, Y: cmd, Color: col, Points: true},
			Line{Name: prof + ": round trips", X: xs, Y: rt, Color: col, Dashes: dashed, Points: true},
			Line{Name: prof + ": urgent syncs", X: xs, Y: urg, Color: col, Dashes: dotted, Points: true})
	}
	if len(eps) == len(xs) {
		acc.Lines = append(acc.Lines, Line{Name: "ε (the bound)", X: xs, Y: eps, Color: red, Dashes: dotted})
	}
	if err := acc.Save(filepath.Join(dir, "sweep-"+param+"-accuracy"+Ext)); err != nil {
		return err
	}
	return cost.Save(filepath.Join(dir, "sweep-"+param+"-cost"+Ext))
}

// find returns the scenario of profile at sweep point i (scenarios are in
// point-major order).
func find(ss []Scenario, profile string, i, nprof int) *Scenario {
	for j := i * nprof; j < (i+1)*nprof && j < len(ss); j++ {
		if ss[j].Settings.Profile == profile {
			return &ss[j]
		}
	}
	return nil
}
