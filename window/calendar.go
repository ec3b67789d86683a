package window

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// longest is the longest period of each policy.Period, an hour over its longest
// civil length for a daylight-saving change: what the store keeps a key
// for (the geometry's nominal window).
var longest = [...]time.Duration{
	policy.Day:   25 * time.Hour,
	policy.Week:  7*24*time.Hour + time.Hour,
	policy.Month: 31*24*time.Hour + time.Hour,
}

// calendar cuts time into the periods of a policy.Period (a day, an ISO
// week from Monday, or a month) in a time zone: period k
// is the k-th day, week or month since 1970 (as local dates: day 0 is
// 1970-01-01, week 0 starts on Monday 1969-12-29, month 0 is January
// 1970), from the first instant of its first local date to the first
// instant of the next period's. A period's length is the calendar's: a
// day across a daylight-saving change has 23 or 25 hours, a month 28 to 31
// days. It is safe for concurrent use; the latest period asked about
// is cached, so that index costs an atomic load and two comparisons
// while the time stays in it.
type calendar struct {
	unit policy.Period
	loc  *time.Location
	cur  atomic.Pointer[period]
}

// period is one period's index and bounds, ns.
type period struct{ k, start, end int64 }

// NewCalendar returns the geometry of a calendar quota of the periods p in
// loc: a fixed window whose buckets are the periods of its calendar
// (bucket k is period k, from Start(k) to Start(k+1)) rather than
// intervals of one length. Sub and Window return the longest a period can
// be. It panics on the zero Period, an unknown period or a nil loc; callers
// validate rules first (policy.Rule.Validate).
func NewCalendar(p policy.Period, loc *time.Location) Sliding {
	if p < policy.Day || p > policy.Month || loc == nil {
		panic(fmt.Sprintf("window: bad calendar %d in %v", p, loc))
	}
	c := &calendar{unit: p, loc: loc}
	return Sliding{sub: int64(c.longestPeriod()), buckets: 1, fixed: true, cal: c}
}

// longestPeriod returns an upper bound on the length of a period.
func (c *calendar) longestPeriod() time.Duration { return longest[c.unit] }

// index returns the period that holds t (ns since the Unix epoch).
func (c *calendar) index(t int64) int64 {
	if p := c.cur.Load(); p != nil && t >= p.start && t < p.end {
		return p.k
	}
	return c.find(t).k
}

// bounds returns the start and the end of period k, ns.
func (c *calendar) bounds(k int64) (start, end int64) {
	if p := c.cur.Load(); p != nil && p.k == k {
		return p.start, p.end
	}
	return c.first(k), c.first(k + 1)
}

// start returns the start of period k, ns: the end of period k−1.
func (c *calendar) start(k int64) int64 {
	s, _ := c.bounds(k)
	return s
}

// find computes the period of t, and caches it if it is later than the
// one cached.
func (c *calendar) find(t int64) period {
	k := c.indexOf(t)
	p := period{k: k, start: c.first(k), end: c.first(k + 1)}
	// A daylight-saving change at local midnight can put t before the
	// first instant of its date's day as the calendar reckons it (a clock
	// set back across midnight repeats the end of the day before): t then
	// belongs to the period before, or after, as the bounds say.
	for t < p.start {
		p = period{k: p.k - 1, start: c.first(p.k - 1), end: p.start}
	}
	for t >= p.end {
		p = period{k: p.k + 1, start: p.end, end: c.first(p.k + 2)}
	}
	if old := c.cur.Load(); old == nil || p.start >= old.end {
		np := p // only a period cached escapes: a miss that stores nothing allocates nothing
		c.cur.Store(&np)
	}
	return p
}

// indexOf returns the period of t's local date.
func (c *calendar) indexOf(t int64) int64 {
	y, m, d := time.Unix(0, t).In(c.loc).Date()
	switch c.unit {
	case policy.Day:
		return dayNumber(y, m, d)
	case policy.Week:
		return floorDiv(dayNumber(y, m, d)+3, 7)
	}
	return int64(y-1970)*12 + int64(m-1)
}

// first returns the first instant of period k, ns.
func (c *calendar) first(k int64) int64 {
	var y int
	var m time.Month
	d := 1
	switch c.unit {
	case policy.Day:
		y, m, d = civil(k)
	case policy.Week:
		y, m, d = civil(7*k - 3)
	default:
		y, m = 1970+int(floorDiv(k, 12)), time.Month(k-12*floorDiv(k, 12)+1)
	}
	return startOfDay(y, m, d, c.loc)
}

// startOfDay returns the first instant whose date in loc is y-m-d, ns.
// time.Date gives a local midnight that a daylight-saving change skips in
// either of the two offsets: before the day (the end of the day before),
// or an instant into it; the first instant is then the change itself.
func startOfDay(y int, m time.Month, d int, loc *time.Location) int64 {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	ty, tm, td := t.Date()
	switch {
	case ty != y || tm != m || td != d:
		if dayNumber(ty, tm, td) < dayNumber(y, m, d) {
			if _, end := t.ZoneBounds(); !end.IsZero() {
				return end.UnixNano()
			}
		}
	case t.Hour() != 0 || t.Minute() != 0 || t.Second() != 0:
		if start, _ := t.ZoneBounds(); !start.IsZero() {
			return start.UnixNano()
		}
	}
	return t.UnixNano()
}

// dayNumber returns the days from 1970-01-01 to y-m-d.
func dayNumber(y int, m time.Month, d int) int64 {
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
}

// civil returns the date n days after 1970-01-01.
func civil(n int64) (int, time.Month, int) {
	return time.Unix(n*86400, 0).UTC().Date()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
