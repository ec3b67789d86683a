package policy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// FuzzParsePeriod parses arbitrary period names: it never panics, accepts
// exactly the names of Day, Week and Month in any case, and an accepted
// name's String parses back to the same period.
func FuzzParsePeriod(f *testing.F) {
	for _, s := range []string{"day", "Week", "MONTH", "", "days", "year", "dαy", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := policy.ParsePeriod(s)
		if err != nil {
			if p != policy.NoPeriod || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%q: %v, %v", s, p, err)
			}
			return
		}
		if !strings.EqualFold(s, p.String()) || p.Length() <= 0 {
			t.Fatalf("%q parsed as %v", s, p)
		}
		if back, err := policy.ParsePeriod(p.String()); err != nil || back != p {
			t.Fatalf("%v does not parse back: %v, %v", p, back, err)
		}
	})
}

// FuzzCalendarRule validates calendar rules of arbitrary period, zone,
// window, algorithm and limit. It never panics; a rejection wraps
// ErrInvalidRule in one line; an accepted rule is a FixedWindow with no
// Window in a zone that loads, and its calendar puts any time at in a
// period that holds it, no longer than the calendar's bound, that the next
// period follows without a gap.
func FuzzCalendarRule(f *testing.F) {
	day := int64(24 * time.Hour)
	f.Add(uint8(policy.Day), "Europe/Berlin", int64(0), uint8(policy.FixedWindow), int64(100), int64(1_792_800_000)*int64(time.Second))
	f.Add(uint8(policy.Week), "America/New_York", int64(0), uint8(policy.FixedWindow), int64(1), int64(0))
	f.Add(uint8(policy.Month), "", int64(0), uint8(policy.FixedWindow), int64(policy.MaxLimit), int64(-day))
	f.Add(uint8(policy.Month), "America/Santiago", int64(0), uint8(policy.FixedWindow), int64(5), int64(1_757_217_600)*int64(time.Second))
	f.Add(uint8(policy.Day), "Local", int64(0), uint8(policy.FixedWindow), int64(5), int64(0))
	f.Add(uint8(policy.Day), "../etc/passwd", int64(0), uint8(policy.FixedWindow), int64(5), int64(0))
	f.Add(uint8(policy.Day), "UTC", day, uint8(policy.FixedWindow), int64(5), int64(0))
	f.Add(uint8(policy.Day), "UTC", int64(0), uint8(policy.SlidingWindow), int64(5), int64(0))
	f.Add(uint8(4), "UTC", int64(0), uint8(policy.FixedWindow), int64(5), int64(0))
	f.Add(uint8(0), "UTC", day, uint8(policy.FixedWindow), int64(5), int64(0))
	f.Fuzz(func(t *testing.T, period uint8, zone string, win int64, algorithm uint8, limit, at int64) {
		r := policy.Rule{Name: "cal", Limit: limit, Window: time.Duration(win), Algorithm: policy.Algorithm(algorithm), Period: policy.Period(period), TimeZone: zone}
		err := r.Validate()
		if err != nil {
			if !errors.Is(err, policy.ErrInvalidRule) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q: want a one-line ErrInvalidRule", err)
			}
			return
		}
		if !rulegeo.Calendar(r) {
			return
		}
		if r.Algorithm != policy.FixedWindow || r.Window != 0 || r.WindowLength() != r.Period.Length() {
			t.Fatalf("accepted %+v", r)
		}
		loc, err := time.LoadLocation(r.TimeZone)
		if err != nil {
			t.Fatalf("accepted a zone that does not load: %v", err)
		}
		geo := window.NewCalendar(r.Period, loc)
		at = max(min(at, int64(1)<<62), -int64(1)<<62) // about ±146 years
		k := geo.Index(at)
		start, end := geo.Start(k), geo.Start(k+1)
		if start > at || at >= end || end-start > int64(geo.Window()) {
			t.Fatalf("%v in %s: period %d is [%d, %d)", at, zone, k, start, end)
		}
		if geo.Index(end-1) != k || geo.Index(end) != k+1 {
			t.Fatalf("%v in %s: period %d ends at %d, not where the next starts", at, zone, k, end)
		}
	})
}
