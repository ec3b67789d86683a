// Package oracle measures a fleet's decisions against exact references: it
// replays the merged stream of checks, key by key in time order, through an
// exact sliding log (the reference model Log) and through the fleet's own
// algorithm run centrally (the reference model Counter with the same
// geometry), and computes these accuracy measurements (for a TokenBucket or
// GCRA rule the exact reference and the central algorithm are both one exact
// bucket, window.GCRA, and the over-admission is measured against the
// bucket's bound: see Params; for a SlidingLog both are the exact log):
//
//   - over-admission: per key, max over t of the cost admitted in (t−W, t],
//     divided by L, minus 1 — for the fleet, and for the central algorithm
//     (the algorithm's own error); and the fleet's admissions as the
//     algorithm itself estimates them (max over t of E(t)/L − 1), which is what
//     the error budget bounds;
//   - utilization: for keys offered at least 2·L in some window, admitted ÷
//     what the exact limiter admits;
//   - false denials: denials of keys never offered more than 0.9·L in any
//     window (the target is none);
//   - wrong decisions: the fraction of checks decided differently from the
//     exact limiter replaying the same stream.
//
// A record whose decision time is known only modulo a period (its Early > 0:
// the call outlasted the period, so the time recovered from ResetAfter has
// several candidates, the record's T the latest) counts in the fleet's
// over-admission and in its own estimate only where every candidate would
// count it: in the real windows holding both its earliest and its latest
// time, and in the estimate through the earliest time's bucket from T on. It
// is judged in the admission's favour where its time is not provable, and
// counted like any other where it is.
package oracle

import (
	"container/heap"
	"math"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/lat"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/record"
	model "github.com/sluicehq/sluice/internal/reference"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// Params describe the rule the records were decided under.
type Params struct {
	// Geometry is the rule's counting geometry (window.NewSliding or
	// window.NewFixed); for the other algorithms, one sub-window of W.
	Geometry window.Sliding
	// Limit is L.
	Limit int64
	// Algorithm is the rule's algorithm; the zero value is SlidingWindow,
	// whose central reference is the reference model Counter on Geometry, as
	// that of WeightedWindow and FixedWindow.
	Algorithm policy.Algorithm
	// Burst is the capacity of a TokenBucket or GCRA (0 means Limit). Its
	// "most admitted in a window" (MaxFleet, MaxCentral, MaxEstimate) is
	// the most admitted in any interval (s, t] less the refill of that
	// interval, max A(s, t] − (t − s)/T: at most Burst for an exact
	// bucket, which is its bound Burst + r·τ; over-admission is that over
	// Limit, minus 1, so the load test runs buckets with Burst = Limit.
	Burst int64
	// WholeWindows, if not empty, is the run's span on the store clock,
	// and utilization is judged on the windows (t−W, t] wholly inside it
	// instead of on the run's totals: per key, the mean over t of what the
	// fleet held in the window against what the exact limiter held. A run
	// of few windows whose keys are offered flat out ends mid-cycle: the
	// fleet's admissions, spread over a window, hold room in the last one
	// that an exact limiter, which admits all it can at once, has used by
	// the end, so totals would count a shift in time as a shortfall. Each
	// admission at s weighs the time it spends in such windows,
	// |[s, s+W) ∩ [From+W, To]|.
	WholeWindows Span
}

// Span is an interval of store-clock time, ns.
type Span struct{ From, To int64 }

// weight returns how long an admission at t lies in windows wholly inside
// the span, in windows (0 if the span holds no whole window).
func (p Params) weight(t int64) float64 {
	sp := p.WholeWindows
	w := int64(p.Window())
	lo, hi := max(t, sp.From+w), min(t+w, sp.To)
	if hi <= lo {
		return 0
	}
	return float64(hi-lo) / float64(w)
}

// whole reports whether utilization is judged on whole windows, and
// whether the span holds at least one.
func (p Params) whole() (on, any bool) {
	sp := p.WholeWindows
	if sp == (Span{}) {
		return false, false
	}
	return true, sp.To-sp.From > int64(p.Window())
}

// bucket reports whether the rule is a TokenBucket or GCRA.
func (p Params) bucket() bool {
	return p.Algorithm == policy.TokenBucket || p.Algorithm == policy.GCRA
}

// reference is an exact or central algorithm replaying one key's checks.
type reference interface {
	Allow(t, n int64) bool
}

// gcraRef is one exact bucket (window.GCRA) replaying a key's checks.
type gcraRef struct {
	g   window.GCRA
	tat int64
}

func (r *gcraRef) Allow(t, n int64) bool {
	next, ok := r.g.Admit(r.tat, t, n)
	if ok {
		r.tat = next
	}
	return ok
}

// references returns the exact reference and the central algorithm of one
// key: the sliding log and the window counter for the window algorithms, one
// exact bucket (both) for a TokenBucket or GCRA, the log (both) for a
// SlidingLog.
func (p Params) references() (exact, central reference) {
	switch {
	case p.bucket():
		g := window.NewGCRA(p.Window(), p.Limit, p.Burst)
		return &gcraRef{g: g}, &gcraRef{g: g}
	case p.Algorithm == policy.SlidingLog:
		return model.NewLog(p.Window(), p.Limit), model.NewLog(p.Window(), p.Limit)
	}
	return model.NewLog(p.Window(), p.Limit), model.NewCounter(p.Geometry, p.Limit)
}

// maxTracker tracks the most admitted "in a window" of a stream of
// admissions in ascending time order (see Params.Burst).
type maxTracker interface {
	add(t, c int64)
	// addEarly adds an admission recorded at t that may have been made
	// at e ≤ t instead (record.Record.Early): it is counted only in the
	// windows that hold both.
	addEarly(t, e, c int64)
	peak() int64
}

// newMax returns the tracker of p's rule: the most in any window (t−W, t]
// (windowMax), or for a bucket the most in any interval less its refill
// (burstMax).
func (p Params) newMax() maxTracker {
	if p.bucket() {
		return &burstMax{iv: window.NewGCRA(p.Window(), p.Limit, p.Burst).Interval()}
	}
	return &windowMax{w: int64(p.Window())}
}

// burstMax tracks max over s ≤ t of A[s, t] − (t − s)/T by Lindley's
// recursion on an unconditional theoretical arrival time: every admission
// moves it to max(tat, t) + c·T, and (tat − t)/T is then that maximum at t.
type burstMax struct {
	iv  int64
	tat int64
	max int64
}

func (m *burstMax) add(t, c int64) {
	m.tat = max(m.tat, t) + c*m.iv
	// Rounded up: an exact bucket keeps tat − t ≤ Burst·T, so it peaks at
	// Burst exactly, and any excess, however small, shows as a unit.
	if b := (m.tat - t + m.iv - 1) / m.iv; b > m.max {
		m.max = b
	}
}

// addEarly adds the admission at t: a bucket's decision time is never
// ambiguous (it is not recovered modulo a period), so e is t.
func (m *burstMax) addEarly(t, _, c int64) { m.add(t, c) }

func (m *burstMax) peak() int64 { return m.max }

// Window returns W.
func (p Params) Window() time.Duration { return p.Geometry.Window() }

// KeyResult holds one key's measurements.
type KeyResult struct {
	Key    uint32 `json:"key"`
	Checks int64  `json:"checks"`
	// Offered, Admitted: total cost offered to and admitted by the fleet.
	Offered  int64 `json:"offered"`
	Admitted int64 `json:"admitted"`
	// ExactAdmitted, CentralAdmitted: what the exact log and the central
	// algorithm admit replaying the same checks.
	ExactAdmitted   int64 `json:"exact_admitted"`
	CentralAdmitted int64 `json:"central_admitted"`
	// MaxOffered is the most cost offered in any window (t−W, t].
	MaxOffered int64 `json:"max_offered"`
	// MaxOfferedSpan is the most cost offered in any interval of W plus
	// one sub-window (t−W−w, t]: what a sliding window counts at most
	// (W for the other algorithms).
	MaxOfferedSpan int64 `json:"max_offered_span"`
	// MaxFleet, MaxCentral: the most admitted in any window (MaxFleet
	// with the ambiguous admissions counted as the package doc says).
	MaxFleet   int64 `json:"max_fleet"`
	MaxCentral int64 `json:"max_central"`
	// MaxEstimate is the largest estimate E(t) of the fleet's admissions
	// under the rule's own algorithm.
	MaxEstimate float64 `json:"max_estimate"`
	// Denied counts the fleet's denials; DeniedCentral the central
	// algorithm's.
	Denied        int64 `json:"denied"`
	DeniedCentral int64 `json:"denied_central"`
	// Wrong: fleet decisions unlike the exact log's; WrongAdmit the wrongly
	// admitted among them. WrongCentral: central algorithm unlike exact.
	// Disagree: fleet unlike central algorithm.
	Wrong        int64 `json:"wrong"`
	WrongAdmit   int64 `json:"wrong_admit"`
	WrongCentral int64 `json:"wrong_central"`
	Disagree     int64 `json:"disagree"`
	First, Last  int64 `json:"-"`
	// WholeAdmitted, WholeExact, WholeCentral: the admissions of the
	// fleet, the exact log and the central algorithm weighed by their time
	// in the windows wholly inside Params.WholeWindows (0 without it).
	WholeAdmitted float64 `json:"-"`
	WholeExact    float64 `json:"-"`
	WholeCentral  float64 `json:"-"`
	// OverChecks counts the checks made while the key was offered above L
	// in a window holding the check (see Latency).
	OverChecks int64 `json:"over_checks"`
	// latOver, latWithin: the latencies of the key's timed checks made
	// while it was offered above L around them, and of the others.
	latOver, latWithin []uint32
	// slowTripOver, slowTripWithin: see Latency.
	slowTripOver, slowTripWithin int
	// latBelow: the latencies of the key's timed checks made while it was
	// offered no more than 0.9·L around them; slowNear: its slow timed
	// checks within L but above that (see Latency).
	latBelow []uint32
	slowNear int
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Over returns the fleet's over-admission of the key: MaxFleet/L − 1.
func (k *KeyResult) Over(l int64) float64 { return float64(k.MaxFleet)/float64(l) - 1 }

// OverCentral returns the central algorithm's over-admission.
func (k *KeyResult) OverCentral(l int64) float64 { return float64(k.MaxCentral)/float64(l) - 1 }

// OverEstimate returns the fleet's over-admission as its algorithm counts.
func (k *KeyResult) OverEstimate(l int64) float64 { return k.MaxEstimate/float64(l) - 1 }

// Summary aggregates a run.
type Summary struct {
	Checks   int64 `json:"checks"`
	Admitted int64 `json:"admitted"`
	Keys     int   `json:"keys"`
	// LimitedKeys were offered more than L in some window: the keys the
	// over-admission percentiles are taken over.
	LimitedKeys int `json:"limited_keys"`

	// Over-admission (fraction of L, ≥ 0) of the fleet, exact measure.
	OverMax float64 `json:"over_max"`
	OverP99 float64 `json:"over_p99"`
	// The algorithm's own error: the central algorithm's over-admission.
	AlgoOverMax float64 `json:"algo_over_max"`
	AlgoOverP99 float64 `json:"algo_over_p99"`
	// The fleet's error: per key, fleet minus central over-admission.
	ExcessMax float64 `json:"excess_max"`
	ExcessP99 float64 `json:"excess_p99"`
	// EstimateOverMax is the fleet's over-admission in the algorithm's own
	// estimate: what the error budget bounds (≤ ε).
	EstimateOverMax float64 `json:"estimate_over_max"`
	// WorstKey has the largest fleet over-admission (-1: none over).
	WorstKey int64 `json:"worst_key"`
	// HottestKey was offered the most.
	HottestKey int64 `json:"hottest_key"`

	// Utilization over HotKeys (offered ≥ 2·L in some window): admitted ÷
	// exact admitted, summed over the keys, and the lowest per key (all 0
	// when there are no hot keys); on the windows wholly inside the run
	// when UtilizationWhole (Params.WholeWindows), where HotKeys is 0 if the
	// run holds no whole window.
	HotKeys            int     `json:"hot_keys"`
	Utilization        float64 `json:"utilization"`
	UtilizationMin     float64 `json:"utilization_min"`
	AlgoUtilization    float64 `json:"algo_utilization"`
	AlgoUtilizationMin float64 `json:"algo_utilization_min"`
	UtilizationWhole   bool    `json:"utilization_whole_windows,omitempty"`

	// QuietKeys were never offered more than 0.9·L in a window; their
	// denials are false denials.
	QuietKeys           int   `json:"quiet_keys"`
	FalseDenials        int64 `json:"false_denials"`
	FalseDenialKeys     int   `json:"false_denial_keys"`
	AlgoFalseDenials    int64 `json:"algo_false_denials"`
	AlgoFalseDenialKeys int   `json:"algo_false_denial_keys"`
	// SpanQuietKeys were never offered more than 0.9·L in any interval of
	// W plus one sub-window: the keys a sliding window never denies,
	// whatever their bursts (docs/design.md); SpanFalseDenialKeys of them
	// were denied.
	SpanQuietKeys       int `json:"span_quiet_keys"`
	SpanFalseDenialKeys int `json:"span_false_denial_keys"`

	// Decision rates: fleet vs exact (wrong decisions), split into wrongly
	// admitted and wrongly denied; central algorithm vs exact; fleet vs
	// central algorithm.
	WrongRate      float64 `json:"wrong_rate"`
	WrongAdmitRate float64 `json:"wrong_admit_rate"`
	WrongDenyRate  float64 `json:"wrong_deny_rate"`
	AlgoWrongRate  float64 `json:"algo_wrong_rate"`
	DisagreeRate   float64 `json:"disagree_rate"`
}

// Latency splits the latency of the timed checks (record.Timed) by the
// key's load around the check: a check is "over" if its key was offered
// more than L in some window (s−W, s] holding it (s in [t, t+W)), where an
// instance may have used its share and have to ask Redis; "within"
// otherwise, where no check should wait.
type Latency struct {
	// Checks counts every check, OverChecks those made while their key
	// was offered above L around them.
	Checks     int64 `json:"checks"`
	OverChecks int64 `json:"over_checks"`
	// All, Over, Within: the quantiles of the timed checks, all of them,
	// over, within.
	All    lat.Quantiles `json:"all"`
	Over   lat.Quantiles `json:"over"`
	Within lat.Quantiles `json:"within"`
	// SlowTripOver, SlowTripWithin: the slow timed checks (lat.Slow),
	// over and within, during whose call their instance had a round trip
	// to Redis for checks (record.RoundTrip): those that may have waited
	// for Redis; the other slow ones waited for a CPU.
	SlowTripOver   int `json:"slow_round_trip_over"`
	SlowTripWithin int `json:"slow_round_trip_within"`
	// Below: the quantiles of the timed checks made while their key was
	// offered no more than 0.9·L in every window holding them, a subset of
	// Within; SlowNear counts the slow timed checks of Within made while
	// their key was offered above 0.9·L in a window holding them, where no
	// lease is granted (the last tenth of the limit is decided by the
	// store): the slow checks of Within that are not of Below.
	Below    lat.Quantiles `json:"below"`
	SlowNear int           `json:"slow_near"`
}

// Analysis is the result of Analyze: the summary, every key's result, and
// the records grouped by key in time order (for series).
type Analysis struct {
	Params  Params
	Summary Summary
	Latency Latency
	Keys    []KeyResult
	recs    []record.Record
	offs    map[uint32][2]int // key → [start, end) in recs
}

// Analyze sorts recs in place (by key, then time) and measures them.
func Analyze(recs []record.Record, p Params) *Analysis {
	a := &Analysis{Params: p, recs: recs, offs: map[uint32][2]int{}}
	sortRecords(recs)
	var spans [][2]int
	for i := 0; i < len(recs); {
		j := i + 1
		for j < len(recs) && recs[j].Key == recs[i].Key {
			j++
		}
		spans = append(spans, [2]int{i, j})
		a.offs[recs[i].Key] = [2]int{i, j}
		i = j
	}
	a.Keys = make([]KeyResult, len(spans))
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	next := make(chan int, len(spans))
	for i := range spans {
		next <- i
	}
	close(next)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				a.Keys[i] = measureKey(recs[spans[i][0]:spans[i][1]], p)
			}
		}()
	}
	wg.Wait()
	a.Summary = summarize(a.Keys, p)
	a.Latency = latency(a.Keys)
	return a
}

// latency gathers the keys' timed checks into Latency (and drops them from
// the keys).
func latency(keys []KeyResult) Latency {
	var l Latency
	var over, within, below []uint32
	for i := range keys {
		k := &keys[i]
		l.Checks += k.Checks
		l.OverChecks += k.OverChecks
		l.SlowTripOver += k.slowTripOver
		l.SlowTripWithin += k.slowTripWithin
		l.SlowNear += k.slowNear
		over = append(over, k.latOver...)
		within = append(within, k.latWithin...)
		below = append(below, k.latBelow...)
		k.latOver, k.latWithin, k.latBelow = nil, nil, nil
	}
	all := make([]uint32, 0, len(over)+len(within))
	all = append(append(all, over...), within...)
	l.All, l.Over, l.Within, l.Below = lat.Of(all), lat.Of(over), lat.Of(within), lat.Of(below)
	return l
}

// overSpans returns the intervals, in time order and disjoint, during which
// a key was offered more than L in a window holding the time: the union of
// (s−W, s] over the times s at which the window ending at s held more than
// L offered (rs sorted by time). A window's sum changes only at a record, so
// those times are record times.
func overSpans(rs []record.Record, l, w int64) []Span {
	var spans []Span
	m := windowMax{w: w}
	for _, r := range rs {
		m.add(r.T, int64(r.Cost))
		if m.sum <= l {
			continue
		}
		lo := r.T - w // exclusive
		if n := len(spans); n > 0 && lo < spans[n-1].To {
			spans[n-1].To = r.T
			continue
		}
		spans = append(spans, Span{lo, r.T})
	}
	return spans
}

func cmp(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// windowMax tracks the largest sum of costs in any window (t−W, t] over a
// stream of times in ascending order.
type windowMax struct {
	w     int64
	times []int64
	costs []int64
	head  int
	sum   int64
	max   int64
	// early holds the admissions added by addEarly still counted, by the
	// time they leave the window.
	early leaveHeap
}

func (m *windowMax) peak() int64 { return m.max }

// addEarly counts c, recorded at t but possibly decided at any time down to
// e, in the windows (s−W, s] that hold both t and e: from s = t until s =
// e + W, when e leaves (never, if e + W ≤ t).
func (m *windowMax) addEarly(t, e, c int64) {
	m.expire(t)
	if e+m.w > t {
		heap.Push(&m.early, leave{at: e + m.w, c: c})
		m.sum += c
	}
	m.max = max(m.max, m.sum)
}

// expire drops what has left the window ending at t.
func (m *windowMax) expire(t int64) {
	for m.head < len(m.times) && m.times[m.head] <= t-m.w {
		m.sum -= m.costs[m.head]
		m.head++
	}
	for len(m.early) > 0 && m.early[0].at <= t {
		m.sum -= heap.Pop(&m.early).(leave).c
	}
}

func (m *windowMax) add(t, c int64) {
	m.times = append(m.times, t)
	m.costs = append(m.costs, c)
	m.sum += c
	m.expire(t)
	if m.sum > m.max {
		m.max = m.sum
	}
	if m.head > 4096 && m.head*2 > len(m.times) {
		m.times = append(m.times[:0], m.times[m.head:]...)
		m.costs = append(m.costs[:0], m.costs[m.head:]...)
		m.head = 0
	}
}

// leave is an admission counted until at.
type leave struct{ at, c int64 }

// leaveHeap is a min-heap of leaves by time (container/heap).
type leaveHeap []leave

func (h leaveHeap) Len() int           { return len(h) }
func (h leaveHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h leaveHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *leaveHeap) Push(x any)        { *h = append(*h, x.(leave)) }
func (h *leaveHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// measureKey replays one key's records (sorted by time).
func measureKey(rs []record.Record, p Params) KeyResult {
	w := int64(p.Window())
	k := KeyResult{Key: rs[0].Key, First: rs[0].T, Last: rs[len(rs)-1].T}
	exact, central := p.references()
	est := model.NewCounter(p.Geometry, p.Limit)
	windowed := p.Algorithm == policy.SlidingWindow || p.Algorithm == policy.WeightedWindow || p.Algorithm == policy.FixedWindow
	offered := windowMax{w: w}
	span := windowMax{w: w}
	if p.Algorithm == policy.SlidingWindow || p.Algorithm == policy.WeightedWindow {
		span.w += p.Geometry.Sub()
	}
	fleet := p.newMax()
	cent := p.newMax()
	period := p.Geometry.Sub() // the period decision times are recovered modulo
	whole, _ := p.whole()
	spans := overSpans(rs, p.Limit, w)
	nears := overSpans(rs, p.Limit*9/10, w)
	sp, sn := 0, 0 // the first span not wholly before the current record
	for _, r := range rs {
		for sp < len(spans) && spans[sp].To < r.T {
			sp++
		}
		for sn < len(nears) && nears[sn].To < r.T {
			sn++
		}
		over := sp < len(spans) && r.T > spans[sp].From
		near := sn < len(nears) && r.T > nears[sn].From
		if over {
			k.OverChecks++
		}
		if d, ok := r.Latency(); ok {
			trip := d >= lat.Slow && r.Flags&record.RoundTrip != 0
			if over {
				k.latOver = append(k.latOver, uint32(d))
				k.slowTripOver += b2i(trip)
			} else {
				k.latWithin = append(k.latWithin, uint32(d))
				k.slowTripWithin += b2i(trip)
				if !near {
					k.latBelow = append(k.latBelow, uint32(d))
				} else {
					k.slowNear += b2i(d >= lat.Slow)
				}
			}
		}
		c := int64(r.Cost)
		k.Checks++
		k.Offered += c
		offered.add(r.T, c)
		span.add(r.T, c)
		ex := exact.Allow(r.T, c)
		ce := central.Allow(r.T, c)
		fl := r.Admitted()
		var wt float64
		if whole {
			wt = float64(c) * p.weight(r.T)
		}
		if ex {
			k.ExactAdmitted += c
			k.WholeExact += wt
		}
		if ce {
			k.CentralAdmitted += c
			k.WholeCentral += wt
			cent.add(r.T, c)
		} else {
			k.DeniedCentral++
		}
		if fl {
			k.Admitted += c
			k.WholeAdmitted += wt
			if r.Early == 0 || !windowed {
				fleet.add(r.T, c)
				if windowed {
					est.Add(r.T, c)
				}
			} else {
				// Decided at r.T or up to Early periods before: counted
				// only where every such time would count it, in the
				// real windows and in the algorithm's estimate (for
				// which the earliest time's bucket leaves first).
				e := r.T - int64(r.Early)*period
				fleet.addEarly(r.T, e, c)
				if geo := p.Geometry; geo.Index(e) > geo.Index(r.T)-int64(geo.Span()) {
					est.Add(e, c)
				}
			}
			if windowed {
				if e := est.Estimate(r.T); e > k.MaxEstimate {
					k.MaxEstimate = e
				}
			}
		} else {
			k.Denied++
		}
		if fl != ex {
			k.Wrong++
			if fl {
				k.WrongAdmit++
			}
		}
		if ce != ex {
			k.WrongCentral++
		}
		if fl != ce {
			k.Disagree++
		}
	}
	k.MaxOffered, k.MaxFleet, k.MaxCentral = offered.max, fleet.peak(), cent.peak()
	k.MaxOfferedSpan = span.max
	if !windowed {
		// The algorithm counts exactly what it bounds.
		k.MaxEstimate = float64(k.MaxFleet)
	}
	return k
}

func summarize(keys []KeyResult, p Params) Summary {
	l := p.Limit
	s := Summary{Keys: len(keys), WorstKey: -1, HottestKey: -1, UtilizationMin: math.Inf(1), AlgoUtilizationMin: math.Inf(1)}
	var over, algo, excess []float64
	var hotAdm, hotCent, hotExact float64
	whole, anyWhole := p.whole()
	s.UtilizationWhole = whole
	var wrong, wrongAdmit, wrongCentral, disagree int64
	worst, hottest := 0.0, int64(-1)
	for i := range keys {
		k := &keys[i]
		s.Checks += k.Checks
		s.Admitted += k.Admitted
		wrong += k.Wrong
		wrongAdmit += k.WrongAdmit
		wrongCentral += k.WrongCentral
		disagree += k.Disagree
		s.EstimateOverMax = math.Max(s.EstimateOverMax, k.OverEstimate(l))
		if k.Offered > hottest {
			hottest, s.HottestKey = k.Offered, int64(k.Key)
		}
		if o := k.Over(l); o > worst {
			worst, s.WorstKey = o, int64(k.Key)
		}
		if k.MaxOffered > l {
			s.LimitedKeys++
			over = append(over, math.Max(k.Over(l), 0))
			algo = append(algo, math.Max(k.OverCentral(l), 0))
			excess = append(excess, k.Over(l)-k.OverCentral(l))
		}
		if k.MaxOffered >= 2*l && (!whole || anyWhole) {
			s.HotKeys++
			adm, cent, exact := float64(k.Admitted), float64(k.CentralAdmitted), float64(k.ExactAdmitted)
			if whole {
				adm, cent, exact = k.WholeAdmitted, k.WholeCentral, k.WholeExact
			}
			hotAdm += adm
			hotCent += cent
			hotExact += exact
			if exact > 0 {
				s.UtilizationMin = min(s.UtilizationMin, adm/exact)
				s.AlgoUtilizationMin = min(s.AlgoUtilizationMin, cent/exact)
			}
		}
		if float64(k.MaxOffered) <= 0.9*float64(l) {
			s.QuietKeys++
			if k.Denied > 0 {
				s.FalseDenials += k.Denied
				s.FalseDenialKeys++
			}
			if k.DeniedCentral > 0 {
				s.AlgoFalseDenials += k.DeniedCentral
				s.AlgoFalseDenialKeys++
			}
		}
		if float64(k.MaxOfferedSpan) <= 0.9*float64(l) {
			s.SpanQuietKeys++
			if k.Denied > 0 {
				s.SpanFalseDenialKeys++
			}
		}
	}
	if math.IsInf(s.UtilizationMin, 1) {
		s.UtilizationMin, s.AlgoUtilizationMin = 0, 0
	}
	s.OverMax, s.OverP99 = maxP99(over)
	s.AlgoOverMax, s.AlgoOverP99 = maxP99(algo)
	s.ExcessMax, s.ExcessP99 = maxP99(excess)
	if hotExact > 0 {
		s.Utilization = hotAdm / hotExact
		s.AlgoUtilization = hotCent / hotExact
	}
	if s.Checks > 0 {
		n := float64(s.Checks)
		s.WrongRate = float64(wrong) / n
		s.WrongAdmitRate = float64(wrongAdmit) / n
		s.WrongDenyRate = float64(wrong-wrongAdmit) / n
		s.AlgoWrongRate = float64(wrongCentral) / n
		s.DisagreeRate = float64(disagree) / n
	}
	return s
}

// maxP99 returns the largest value and the 99th percentile (nearest rank).
func maxP99(xs []float64) (mx, p99 float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	sort.Float64s(xs)
	i := int(math.Ceil(0.99*float64(len(xs)))) - 1
	return xs[len(xs)-1], xs[max(i, 0)]
}

// Series samples, for one key, the cost admitted in the window (t−W, t] by
// the fleet, by the central algorithm and by the exact log, and the cost
// offered, at every step from the key's first record to its last.
type Series struct {
	T       []float64 `json:"t"` // seconds since from
	Fleet   []float64 `json:"fleet"`
	Central []float64 `json:"central"`
	Exact   []float64 `json:"exact"`
	Offered []float64 `json:"offered"`
}

// Series returns the series of key, sampled every step from `from` to `to`
// (store-clock ns); false if the key has no records.
func (a *Analysis) Series(key uint32, from, to int64, step time.Duration) (Series, bool) {
	off, ok := a.offs[key]
	if !ok {
		return Series{}, false
	}
	rs := a.recs[off[0]:off[1]]
	p := a.Params
	exact, central := p.references()
	// Decisions per record, then sliding sums sampled on the grid.
	type ev struct {
		t              int64
		c              int64
		fl, ce, ex, of bool
	}
	evs := make([]ev, len(rs))
	for i, r := range rs {
		c := int64(r.Cost)
		evs[i] = ev{t: r.T, c: c, fl: r.Admitted(), ce: central.Allow(r.T, c), ex: exact.Allow(r.T, c), of: true}
	}
	w := int64(p.Window())
	var s Series
	var head, tail int
	var sf, sc, se, so int64
	for t := from; t <= to; t += int64(step) {
		for tail < len(evs) && evs[tail].t <= t {
			e := evs[tail]
			sf, sc, se, so = sf+pick(e.fl, e.c), sc+pick(e.ce, e.c), se+pick(e.ex, e.c), so+e.c
			tail++
		}
		for head < tail && evs[head].t <= t-w {
			e := evs[head]
			sf, sc, se, so = sf-pick(e.fl, e.c), sc-pick(e.ce, e.c), se-pick(e.ex, e.c), so-e.c
			head++
		}
		s.T = append(s.T, float64(t-from)/1e9)
		s.Fleet = append(s.Fleet, float64(sf))
		s.Central = append(s.Central, float64(sc))
		s.Exact = append(s.Exact, float64(se))
		s.Offered = append(s.Offered, float64(so))
	}
	return s, true
}

func pick(b bool, c int64) int64 {
	if b {
		return c
	}
	return 0
}
