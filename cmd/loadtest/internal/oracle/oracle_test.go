package oracle

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/record"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

const sec = int64(time.Second)

func rec(t int64, key uint32, inst uint16, allowed bool) record.Record {
	r := record.Record{T: t, Key: key, Cost: 1, Inst: inst}
	if allowed {
		r.Flags = record.Allowed
	}
	return r
}

func near(t *testing.T, name string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

// A fleet that admits everything offered at a boundary: 10 in the last
// moment of one fixed window, 10 at the start of the next, L = 10 per second.
func TestOverAdmissionBoundary(t *testing.T) {
	p := Params{Geometry: window.NewFixed(time.Second), Limit: 10}
	var rs []record.Record
	for i := range 10 {
		rs = append(rs, rec(sec-10+int64(i), 0, 0, true))
		rs = append(rs, rec(sec+int64(i), 0, 1, true))
	}
	a := Analyze(rs, p)
	s := a.Summary
	if s.Checks != 20 || s.Admitted != 20 || s.Keys != 1 {
		t.Fatalf("counts: %+v", s)
	}
	// 20 admitted within 20ns: twice the limit.
	near(t, "OverMax", s.OverMax, 1)
	// The fixed window run centrally admits the same 20: all its error.
	near(t, "AlgoOverMax", s.AlgoOverMax, 1)
	near(t, "ExcessMax", s.ExcessMax, 0)
	// Each fixed window holds 10: within the bound in its own estimate.
	near(t, "EstimateOverMax", s.EstimateOverMax, 0)
	// The exact log admits the first 10 only: 10 wrong admissions.
	near(t, "WrongRate", s.WrongRate, 0.5)
	near(t, "WrongAdmitRate", s.WrongAdmitRate, 0.5)
	near(t, "AlgoWrongRate", s.AlgoWrongRate, 0.5)
	near(t, "DisagreeRate", s.DisagreeRate, 0)
	// Offered 20 in a window ≥ 2L: a hot key; utilization 20/10.
	if s.HotKeys != 1 {
		t.Fatalf("HotKeys = %d", s.HotKeys)
	}
	near(t, "Utilization", s.Utilization, 2)
	if s.LimitedKeys != 1 || s.QuietKeys != 0 || s.FalseDenials != 0 {
		t.Errorf("classes: %+v", s)
	}
}

// A key offered 8 per window (≤ 0.9·L) that the fleet denies twice: two false
// denials; the exact log admits everything.
func TestFalseDenials(t *testing.T) {
	p := Params{Geometry: window.NewSliding(time.Second, 10), Limit: 10}
	var rs []record.Record
	for i := range 8 {
		rs = append(rs, rec(int64(i)*sec/8, 3, 0, i%4 != 3))
	}
	// A second key, hot, correctly limited, to check the classes.
	for i := range 30 {
		rs = append(rs, rec(int64(i)*sec/30, 4, 1, i < 10))
	}
	s := Analyze(rs, p).Summary
	if s.QuietKeys != 1 || s.FalseDenials != 2 || s.FalseDenialKeys != 1 {
		t.Errorf("false denials: quiet %d, denials %d on %d keys", s.QuietKeys, s.FalseDenials, s.FalseDenialKeys)
	}
	if s.AlgoFalseDenials != 0 {
		t.Errorf("the central algorithm denies a quiet key: %d", s.AlgoFalseDenials)
	}
	// Wrong: the two false denials of key 3; key 4 is decided as the exact
	// log decides (the first 10 of 30 in one second).
	near(t, "WrongRate", s.WrongRate, 2.0/38)
	near(t, "WrongDenyRate", s.WrongDenyRate, 2.0/38)
	near(t, "OverMax", s.OverMax, 0)
	if s.HotKeys != 1 || s.LimitedKeys != 1 {
		t.Errorf("hot %d limited %d", s.HotKeys, s.LimitedKeys)
	}
	near(t, "Utilization", s.Utilization, 1)
}

// Bursts of 4 every half window on L = 10: never more than 8 in a window,
// but 12 in W plus one sub-window, which a sliding window counts at once:
// quiet by the window, not by the span; a key offered 8 per window evenly
// is quiet by both (at most 9 in W plus a sub-window).
func TestSpanQuietKeys(t *testing.T) {
	p := Params{Geometry: window.NewSliding(time.Second, 10), Limit: 10}
	var rs []record.Record
	for b := range 5 {
		for i := range 4 {
			rs = append(rs, rec(int64(b)*sec/2+int64(i), 5, 0, b != 2 || i < 2))
		}
	}
	for i := range 16 {
		rs = append(rs, rec(int64(i)*sec/8, 6, 1, true))
	}
	s := Analyze(rs, p).Summary
	if s.QuietKeys != 2 || s.SpanQuietKeys != 1 || s.FalseDenialKeys != 1 || s.SpanFalseDenialKeys != 0 {
		t.Errorf("quiet %d (denied %d), in the span %d (denied %d)", s.QuietKeys, s.FalseDenialKeys, s.SpanQuietKeys, s.SpanFalseDenialKeys)
	}
	p.Geometry = window.NewFixed(time.Second)
	p.Algorithm = policy.FixedWindow
	if s := Analyze(rs, p).Summary; s.SpanQuietKeys != s.QuietKeys {
		t.Errorf("a fixed window's span is its window: %d against %d", s.SpanQuietKeys, s.QuietKeys)
	}
}

// The window is (t−W, t]: an admission exactly W after another does not
// share a window with it.
func TestWindowIsHalfOpen(t *testing.T) {
	p := Params{Geometry: window.NewSliding(time.Second, 1), Limit: 1}
	rs := []record.Record{rec(0, 0, 0, true), rec(sec, 0, 0, true), rec(2*sec-1, 0, 1, true)}
	s := Analyze(rs, p).Summary
	// (sec−1, 2sec−1] holds the admissions at sec and 2sec−1: 2 = 2L.
	near(t, "OverMax", s.OverMax, 1)
	rs = []record.Record{rec(0, 0, 0, true), rec(sec, 0, 0, true), rec(2*sec, 0, 1, true)}
	near(t, "OverMax (spaced by W)", Analyze(rs, p).Summary.OverMax, 0)
}

// Two instances each admit the last unit of a window on a stale view: the
// fleet exceeds L by one where the central algorithm would not; the excess is
// the fleet's own error, and the estimate shows it too.
func TestFleetExcess(t *testing.T) {
	p := Params{Geometry: window.NewSliding(time.Second, 10), Limit: 4}
	rs := []record.Record{
		rec(10, 0, 0, true), rec(20, 0, 1, true), rec(30, 0, 0, true),
		rec(40, 0, 0, true), rec(40, 0, 1, true), // both think they have the 4th
		rec(50, 0, 1, false),
	}
	s := Analyze(rs, p).Summary
	near(t, "OverMax", s.OverMax, 0.25)
	near(t, "AlgoOverMax", s.AlgoOverMax, 0)
	near(t, "ExcessMax", s.ExcessMax, 0.25)
	near(t, "EstimateOverMax", s.EstimateOverMax, 0.25)
	// Exact admits 10,20,30,40(inst 0) and denies the rest: one wrong
	// admission (the second at 40).
	near(t, "WrongRate", s.WrongRate, 1.0/6)
	near(t, "DisagreeRate", s.DisagreeRate, 1.0/6)
}

// The weighted estimate: 10 admitted at the very end of bucket 0 with B = 1,
// W = 1s, then 5 more at 1.5s: the estimate at 1.5s is 5 + 0.5·10 = 10, so a
// limit of 10 holds in the estimate, while the exact window (0.5s, 1.5s]
// holds 15. The sliding window, which counts bucket 0 whole until 2s, sees
// 15 in its own estimate too, and would not have admitted the 5.
func TestEstimateMeasure(t *testing.T) {
	p := Params{Geometry: window.NewWeighted(time.Second, 1), Limit: 10}
	var rs []record.Record
	for i := range 10 {
		rs = append(rs, rec(sec-1, 0, uint16(i%2), true))
	}
	for range 5 {
		rs = append(rs, rec(sec+sec/2, 0, 0, true))
	}
	s := Analyze(rs, p).Summary
	near(t, "EstimateOverMax", s.EstimateOverMax, 0)
	near(t, "OverMax", s.OverMax, 0.5)
	// The same algorithm centrally admits exactly these: its own error.
	near(t, "AlgoOverMax", s.AlgoOverMax, 0.5)
	near(t, "ExcessMax", s.ExcessMax, 0)

	p.Geometry = window.NewSliding(time.Second, 1)
	s = Analyze(rs, p).Summary
	near(t, "sliding EstimateOverMax", s.EstimateOverMax, 0.5)
	near(t, "sliding AlgoOverMax", s.AlgoOverMax, 0)
	near(t, "sliding ExcessMax", s.ExcessMax, 0.5)
}

func TestCostsCount(t *testing.T) {
	p := Params{Geometry: window.NewFixed(time.Second), Limit: 10}
	rs := []record.Record{
		{T: 1, Key: 0, Cost: 6, Flags: record.Allowed},
		{T: 2, Key: 0, Cost: 6, Flags: record.Allowed}, // 12 > 10
		{T: 3, Key: 0, Cost: 4},
	}
	a := Analyze(rs, p)
	k := a.Keys[0]
	if k.Offered != 16 || k.Admitted != 12 || k.ExactAdmitted != 10 || k.MaxOffered != 16 {
		t.Errorf("key: %+v", k)
	}
	near(t, "OverMax", a.Summary.OverMax, 0.2)
}

func TestSeries(t *testing.T) {
	p := Params{Geometry: window.NewFixed(time.Second), Limit: 2}
	rs := []record.Record{rec(0, 7, 0, true), rec(sec/2, 7, 0, true), rec(sec*3/4, 7, 0, true)}
	a := Analyze(rs, p)
	s, ok := a.Series(7, 0, sec, time.Second/4)
	if !ok {
		t.Fatal("no series")
	}
	want := []float64{1, 1, 2, 3, 2} // at 0, .25, .5, .75, 1 (the first leaves at 1s)
	for i, v := range want {
		if s.Fleet[i] != v {
			t.Errorf("fleet[%d] = %v, want %v (%v)", i, s.Fleet[i], v, s.Fleet)
		}
	}
	if s.Exact[3] != 2 || s.Offered[3] != 3 {
		t.Errorf("exact %v offered %v", s.Exact, s.Offered)
	}
	if _, ok := a.Series(8, 0, sec, time.Second); ok {
		t.Error("series of an unknown key")
	}
}

func TestMaxP99(t *testing.T) {
	var xs []float64
	for i := range 200 {
		xs = append(xs, float64(i))
	}
	mx, p99 := maxP99(xs)
	if mx != 199 || p99 != 197 {
		t.Errorf("max %v p99 %v", mx, p99)
	}
	if mx, p99 := maxP99(nil); mx != 0 || p99 != 0 {
		t.Error("empty")
	}
}

// The bucket oracle: one exact bucket (window.GCRA) is both the exact and
// the central reference, and over-admission is the most admitted in any
// interval less its refill, over Burst (= Limit), minus 1.
func TestBucketOracle(t *testing.T) {
	for _, a := range []policy.Algorithm{policy.TokenBucket, policy.GCRA} {
		p := Params{Geometry: window.NewSliding(time.Second, 1), Limit: 10, Algorithm: a}
		iv := sec / 10
		// A conforming stream, all admitted: a full burst, then one unit
		// per interval for three seconds.
		var rs []record.Record
		for i := range 10 {
			rs = append(rs, rec(int64(i), 0, 0, true))
		}
		for i := int64(1); i <= 30; i++ {
			rs = append(rs, rec(9+i*iv, 0, 1, true))
		}
		s := Analyze(rs, p).Summary
		near(t, "conforming OverMax", s.OverMax, 0)
		near(t, "conforming WrongRate", s.WrongRate, 0)
		if s.LimitedKeys != 1 {
			t.Fatalf("%v: a key offered 13 per second is limited: %+v", a, s)
		}
		// Two bursts 1ns apart, both admitted: twice the burst.
		rs = rs[:0]
		for i := range 20 {
			rs = append(rs, rec(int64(i), 1, uint16(i%2), true))
		}
		s = Analyze(rs, p).Summary
		near(t, "double burst OverMax", s.OverMax, 1)
		near(t, "double burst AlgoOverMax", s.AlgoOverMax, 0)
		near(t, "double burst ExcessMax", s.ExcessMax, 1)
		near(t, "double burst EstimateOverMax", s.EstimateOverMax, 1)
		near(t, "double burst WrongAdmitRate", s.WrongAdmitRate, 0.5)
	}
}

// The sliding-log oracle: the exact log is both references.
func TestLogOracle(t *testing.T) {
	p := Params{Geometry: window.NewSliding(time.Second, 1), Limit: 10, Algorithm: policy.SlidingLog}
	var rs []record.Record
	for i := range 10 {
		rs = append(rs, rec(int64(i), 0, 0, true), rec(sec+int64(i), 0, 1, true))
	}
	rs = append(rs, rec(sec+10, 0, 0, true)) // the 11th in (t−W, t]
	s := Analyze(rs, p).Summary
	near(t, "OverMax", s.OverMax, 0.1)
	near(t, "AlgoOverMax", s.AlgoOverMax, 0)
	near(t, "WrongAdmitRate", s.WrongAdmitRate, 1.0/21)
}
