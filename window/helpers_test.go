package window_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/sluicehq/sluice/window"
)

// event is one counted request: cost n at time t (ns).
type event struct {
	t int64
	n int64
}

// eventSet is a time-sorted list of events with a prefix sum of their costs,
// for brute-force counting in O(log n).
type eventSet struct {
	ev  []event
	pre []int64 // pre[i] = cost of ev[:i]
}

func newEventSet(ev []event) *eventSet {
	ev = slices.Clone(ev)
	sortEvents(ev)
	pre := make([]int64, len(ev)+1)
	for i, e := range ev {
		pre[i+1] = pre[i] + e.n
	}
	return &eventSet{ev: ev, pre: pre}
}

// upTo returns the number of events with time ≤ t.
func (s *eventSet) upTo(t int64) int {
	return sort.Search(len(s.ev), func(i int) bool { return s.ev[i].t > t })
}

// before returns the number of events with time < t.
func (s *eventSet) before(t int64) int {
	return sort.Search(len(s.ev), func(i int) bool { return s.ev[i].t >= t })
}

// window returns the exact cost of events in (t−w, t].
func (s *eventSet) window(t, w int64) int64 { return s.pre[s.upTo(t)] - s.pre[s.upTo(t-w)] }

// span returns the exact cost of events in [from, to).
func (s *eventSet) span(from, to int64) int64 { return s.pre[s.before(to)] - s.pre[s.before(from)] }

func sortEvents(ev []event) {
	slices.SortStableFunc(ev, func(a, b event) int {
		switch {
		case a.t < b.t:
			return -1
		case a.t > b.t:
			return 1
		}
		return 0
	})
}

// bruteWindow counts the cost of events in (t−w, t] by a linear scan: the
// slowest and plainest oracle, used to check eventSet itself.
func bruteWindow(ev []event, t, w int64) int64 {
	var sum int64
	for _, e := range ev {
		if e.t > t-w && e.t <= t {
			sum += e.n
		}
	}
	return sum
}

// floorDiv is ⌊a/b⌋ for b > 0, written independently of Sliding.Index.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && (a < 0) {
		q--
	}
	return q
}

// generator makes count events with times in [start, start+span), in
// geometry geo, unsorted. Costs are 1 unless maxCost > 1.
type generator struct {
	name string
	gen  func(r *rand.Rand, geo window.Sliding, start, span int64, count int, maxCost int64) []event
}

func cost(r *rand.Rand, maxCost int64) int64 {
	if maxCost <= 1 {
		return 1
	}
	return 1 + r.Int64N(maxCost)
}

// bucketRange returns the first and last buckets overlapping [start, start+span).
func bucketRange(geo window.Sliding, start, span int64) (first, last int64) {
	return geo.Index(start), geo.Index(start + span - 1)
}

var generators = []generator{
	{"uniform", func(r *rand.Rand, _ window.Sliding, start, span int64, count int, maxCost int64) []event {
		ev := make([]event, count)
		for i := range ev {
			ev[i] = event{start + r.Int64N(span), cost(r, maxCost)}
		}
		return ev
	}},
	{"poisson", func(r *rand.Rand, _ window.Sliding, start, span int64, count int, maxCost int64) []event {
		// Exponential gaps with mean span/count: clumps and gaps.
		ev := make([]event, 0, count)
		mean := float64(span) / float64(max(count, 1))
		t := float64(start)
		for len(ev) < count {
			t += r.ExpFloat64() * mean
			if t >= float64(start+span) {
				t = float64(start) + math.Mod(t-float64(start), float64(span))
			}
			ev = append(ev, event{int64(t), cost(r, maxCost)})
		}
		return ev
	}},
	{"bucket-edges", func(r *rand.Rand, geo window.Sliding, start, span int64, count int, maxCost int64) []event {
		// Bursts on the first and last nanoseconds of random buckets.
		first, last := bucketRange(geo, start, span)
		ev := make([]event, 0, count)
		for len(ev) < count {
			j := first + r.Int64N(last-first+1)
			var t int64
			switch r.IntN(4) {
			case 0:
				t = j * geo.Sub()
			case 1:
				t = j*geo.Sub() + min(1, geo.Sub()-1)
			case 2:
				t = (j+1)*geo.Sub() - 1
			default:
				t = (j+1)*geo.Sub() - min(2, geo.Sub())
			}
			burst := 1 + r.IntN(20)
			for b := 0; b < burst && len(ev) < count; b++ {
				ev = append(ev, event{t, cost(r, maxCost)})
			}
		}
		return ev
	}},
	{"all-at-bucket-end", func(r *rand.Rand, geo window.Sliding, start, span int64, count int, maxCost int64) []event {
		// Adversarial: every event on the last nanosecond of its bucket, so
		// the weighted oldest bucket is as wrong as it can be.
		first, last := bucketRange(geo, start, span)
		ev := make([]event, count)
		for i := range ev {
			j := first + r.Int64N(last-first+1)
			ev[i] = event{(j+1)*geo.Sub() - 1, cost(r, maxCost)}
		}
		return ev
	}},
	{"all-at-bucket-start", func(r *rand.Rand, geo window.Sliding, start, span int64, count int, maxCost int64) []event {
		first, last := bucketRange(geo, start, span)
		ev := make([]event, count)
		for i := range ev {
			j := first + r.Int64N(last-first+1)
			ev[i] = event{j * geo.Sub(), cost(r, maxCost)}
		}
		return ev
	}},
}

// queryTimes returns sorted query times for the events: random times over the
// range, every bucket boundary ±1 near the events, and each event time, its
// window exit time and their neighbours.
func queryTimes(r *rand.Rand, geo window.Sliding, ev []event, start, span int64, random int) []int64 {
	w := int64(geo.Window())
	q := make([]int64, 0, random+len(ev)*4)
	end := start + span + w + geo.Sub()
	for range random {
		q = append(q, start+r.Int64N(end-start))
	}
	for _, e := range ev {
		if r.IntN(4) == 0 {
			q = append(q, e.t, e.t+w-1, e.t+w, e.t+w+1)
		}
	}
	first, last := geo.Index(start), geo.Index(end)
	step := max(1, (last-first)/200) // at most a few hundred boundaries
	for j := first; j <= last; j += step {
		q = append(q, j*geo.Sub()-1, j*geo.Sub(), j*geo.Sub()+1)
	}
	slices.Sort(q)
	return slices.Compact(q)
}

// Durations in nanoseconds, as the package takes times.
const (
	usec = int64(time.Microsecond)
	msec = int64(time.Millisecond)
	sec  = int64(time.Second)
)
