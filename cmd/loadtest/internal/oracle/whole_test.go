package oracle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/lat"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/record"
	"github.com/sluicehq/sluice/window"
)

const ms = int64(time.Millisecond)

// flatOut offers key 0 a check every 10ms over [0, end), L = 10 per second
// (a key offered 100 a window: hot), and admits those at the given times
// (ms): the fleet's decisions, which the oracle judges.
func flatOut(end int64, admitted ...int64) []record.Record {
	adm := map[int64]bool{}
	for _, a := range admitted {
		adm[a*ms] = true
	}
	var rs []record.Record
	for t := int64(0); t < end; t += 10 * ms {
		rs = append(rs, rec(t, 0, 0, adm[t]))
	}
	return rs
}

// span returns n admissions 10ms apart from ms.
func span(from int64, n int) []int64 {
	var ts []int64
	for i := range n {
		ts = append(ts, from+10*int64(i))
	}
	return ts
}

// TestWholeWindows: judged on the windows wholly inside the run, a fleet
// whose admissions are shifted in time against the exact log's keeps its
// utilization, where the run's totals, ended mid-cycle, count the shift as
// a shortfall; a fleet that admits half of what it may reads half either
// way.
func TestWholeWindows(t *testing.T) {
	t.Parallel()
	run := Span{From: 0, To: 1950 * ms} // a run of 1.95 windows
	for _, c := range []struct {
		name            string
		admitted        []int64
		totals, windows float64 // utilization
	}{
		// The exact log admits at 0–90ms and 1000–1090ms: 20.
		{"as the log", append(span(0, 10), span(1000, 10)...), 1, 1},
		// Half at the start of the first window, half at its end: the
		// second window's room comes back in two steps, the second after
		// the run's end. 15 admitted against the log's 20; in the windows
		// ending in [1s, 1.95s] the fleet holds 9.35 window·checks to
		// the log's 9.5.
		{"spread over the window", append(append(span(0, 5), span(900, 5)...), span(1000, 5)...), 0.75, 9.35 / 9.5},
		// Half of the limit in every window: a real shortfall.
		{"half", append(span(0, 5), span(1000, 5)...), 0.5, 0.5},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := Params{Geometry: window.NewSliding(time.Second, 10), Limit: 10}
			s := Analyze(flatOut(run.To, c.admitted...), p).Summary
			require.Equal(t, 1, s.HotKeys)
			assert.False(t, s.UtilizationWhole)
			assert.InDelta(t, c.totals, s.UtilizationMin, 1e-9, "on the totals")
			p.WholeWindows = run
			w := Analyze(flatOut(run.To, c.admitted...), p).Summary
			require.Equal(t, 1, w.HotKeys)
			assert.True(t, w.UtilizationWhole)
			assert.InDelta(t, c.windows, w.UtilizationMin, 1e-3, "on the whole windows")
			assert.InDelta(t, w.UtilizationMin, w.Utilization, 1e-9, "one key")
		})
	}
}

// A run shorter than a window holds no whole window: utilization is not
// judged.
func TestWholeWindowsNone(t *testing.T) {
	t.Parallel()
	p := Params{Geometry: window.NewSliding(time.Second, 10), Limit: 10, WholeWindows: Span{0, 900 * ms}}
	s := Analyze(flatOut(900*ms, span(0, 10)...), p).Summary
	assert.True(t, s.UtilizationWhole)
	assert.Zero(t, s.HotKeys)
	assert.Zero(t, s.UtilizationMin)
	assert.Equal(t, 1, s.LimitedKeys, "over-admission is still judged")
}

func TestWeight(t *testing.T) {
	t.Parallel()
	p := Params{Geometry: window.NewSliding(time.Second, 10), WholeWindows: Span{0, 2500 * ms}}
	for _, c := range []struct {
		at   int64 // ms
		want float64
	}{
		{0, 0},        // its windows end before the first whole one
		{400, 0.4},    // in the windows ending at [1000, 1400)
		{1000, 1},     // a whole window's time
		{1500, 1},     // [1500, 2500)
		{2000, 0.5},   // until the run's end
		{2500, 0},     // at the end
		{-1000, 0},    // before the run
		{3000, 0},     // after it
		{1999, 0.501}, // [1999, 2500)
	} {
		assert.InDelta(t, c.want, p.weight(c.at*ms), 1e-9, "at %dms", c.at)
	}
}

// TestOverSpans: the times a key was offered more than L in a window
// holding them.
func TestOverSpans(t *testing.T) {
	t.Parallel()
	w := int64(time.Second)
	at := func(ts ...int64) []record.Record {
		var rs []record.Record
		for _, t := range ts {
			rs = append(rs, rec(t*ms, 0, 0, false))
		}
		return rs
	}
	for _, c := range []struct {
		name string
		rs   []record.Record
		l    int64
		want []Span
	}{
		{"never over", at(0, 500, 999), 3, nil},
		// The third check in a window makes 3 > 2: the window (−0.8s,
		// 0.2s] held more than L.
		{"one window", at(0, 100, 200), 2, []Span{{200*ms - w, 200 * ms}}},
		// Over at 0.2s and again at 0.9s: one span.
		{"overlapping", at(0, 100, 200, 800, 850, 900), 2, []Span{{200*ms - w, 900 * ms}}},
		// Over at 0.2s, then at 3.2s: two spans.
		{"apart", at(0, 100, 200, 3000, 3100, 3200), 2, []Span{{200*ms - w, 200 * ms}, {3200*ms - w, 3200 * ms}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, c.want, overSpans(c.rs, c.l, w))
		})
	}
}

// TestLatencySplit: the timed checks of a key offered above L around them
// count as over, the others (other times, other keys) within; untimed
// checks count in neither.
func TestLatencySplit(t *testing.T) {
	t.Parallel()
	timed := func(r record.Record, d time.Duration, trip bool) record.Record {
		r.Flags |= record.Timed
		r.Lat = uint32(d)
		if trip {
			r.Flags |= record.RoundTrip
		}
		return r
	}
	slow, fast := 2*lat.Slow, lat.Slow/10
	rs := []record.Record{
		// Key 0: three checks within 0.2s (L = 2: over), the first two
		// timed; then a quiet check 5s later.
		timed(rec(0, 0, 0, true), slow, true),
		timed(rec(100*ms, 0, 0, true), fast, false),
		rec(200*ms, 0, 0, false),
		timed(rec(5000*ms, 0, 0, true), slow, false),
		// Key 1: one check, within.
		timed(rec(0, 1, 0, true), fast, false),
	}
	a := Analyze(rs, Params{Geometry: window.NewSliding(time.Second, 10), Limit: 2})
	l := a.Latency
	assert.Equal(t, int64(5), l.Checks)
	assert.Equal(t, int64(3), l.OverChecks)
	assert.Equal(t, 4, l.All.N)
	assert.Equal(t, 2, l.Over.N)
	assert.Equal(t, 2, l.Within.N)
	assert.Equal(t, 1, l.Over.Slow)
	assert.Equal(t, 1, l.Within.Slow)
	assert.Equal(t, 1, l.SlowTripOver, "the slow over check had a round trip")
	assert.Equal(t, 0, l.SlowTripWithin, "the slow within check had none: a CPU")
	assert.Equal(t, slow, l.Within.P999)
	assert.Equal(t, slow, l.All.Max)
}

// TestLatencyNear: of the timed checks within L, those made while their key
// was offered above 0.9·L around them are left out of Below, and counted in
// SlowNear if slow; the others are Below.
func TestLatencyNear(t *testing.T) {
	t.Parallel()
	timed := func(r record.Record, d time.Duration) record.Record {
		r.Flags |= record.Timed | record.RoundTrip
		r.Lat = uint32(d)
		return r
	}
	slow, fast := 2*lat.Slow, lat.Slow/10
	var rs []record.Record
	// Key 0: ten checks in 0.5 s (L = 10: within, but above 0.9·L = 9), the
	// last one timed and slow, the first one timed and fast.
	rs = append(rs, timed(rec(0, 0, 0, true), fast))
	for i := int64(1); i < 9; i++ {
		rs = append(rs, rec(i*50*ms, 0, 0, true))
	}
	rs = append(rs, timed(rec(450*ms, 0, 0, true), slow))
	// Key 1: two checks, far below, one slow.
	rs = append(rs, timed(rec(0, 1, 0, true), fast), timed(rec(10*ms, 1, 0, true), slow))
	a := Analyze(rs, Params{Geometry: window.NewSliding(time.Second, 10), Limit: 10})
	l := a.Latency
	assert.Zero(t, l.OverChecks)
	assert.Equal(t, 4, l.Within.N)
	assert.Equal(t, 2, l.Within.Slow)
	assert.Equal(t, 2, l.Below.N, "key 1's checks: key 0 was offered 10 > 9 in windows holding each of its checks")
	assert.Equal(t, 1, l.Below.Slow)
	assert.Equal(t, 1, l.SlowNear)
}
