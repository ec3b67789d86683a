package policy

import (
	"fmt"
	"strings"
	"time"
)

// Period makes a rule a calendar quota: Limit per calendar day, week or
// month in the rule's TimeZone, each period counted as one fixed window
// that starts and ends at local midnight, whatever its length (a 23- or
// 25-hour day across a daylight-saving change, a 28- to 31-day month).
type Period uint8

const (
	// noPeriod (the zero value) is a rule counted over its Window.
	noPeriod Period = iota
	// Day is a calendar day, from local midnight to the next.
	Day
	// Week is an ISO week, from Monday's local midnight to the next
	// Monday's.
	Week
	// Month is a calendar month, from the local midnight that starts its
	// first day to the one that starts the next month's.
	Month
)

// String returns the period's name as used in policy files.
func (p Period) String() string {
	switch p {
	case noPeriod:
		return ""
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	}
	return fmt.Sprintf("Period(%d)", uint8(p))
}

// Length returns the period's nominal length, which speaks of a calendar
// rule where a length is wanted (RateLimit-Policy's window, the time its
// counts take to lapse): 24 hours, 7 days, 30 days; 0 for the zero Period (none). The
// periods themselves are the calendar's (see Period).
func (p Period) Length() time.Duration {
	switch p {
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	}
	return 0
}

// parsePeriod returns the period named s ("day", "week" or "month", in any
// case), or an error that says what the names are.
func parsePeriod(s string) (Period, error) {
	for _, p := range []Period{Day, Week, Month} {
		if strings.EqualFold(s, p.String()) {
			return p, nil
		}
	}
	return noPeriod, fmt.Errorf("%q is not a period: use day, week or month", s)
}

// calendar reports whether the rule is a calendar quota (Period set).
func (r Rule) calendar() bool { return r.Period != noPeriod }

// WindowLength returns the rule's Window, or for a calendar quota its
// Period's nominal Length.
func (r Rule) WindowLength() time.Duration {
	if r.calendar() {
		return r.Period.Length()
	}
	return r.Window
}

// location returns the time zone of a calendar rule: TimeZone loaded from
// the system's time zone database (or the one a program embeds with
// import _ "time/tzdata"); UTC for an empty TimeZone. internal/rulegeo's
// Location restates it for the engines (it imports policy, so cannot be
// called here): change the two together.
func (r Rule) location() (*time.Location, error) {
	if r.TimeZone == "Local" {
		return nil, fmt.Errorf("TimeZone \"Local\" is each instance's own zone, which a fleet need not share: name the zone, such as Europe/Berlin")
	}
	loc, err := time.LoadLocation(r.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("TimeZone %q is not a known time zone: use an IANA name such as America/New_York, or UTC; a program on a system without a time zone database can import _ \"time/tzdata\"", r.TimeZone)
	}
	return loc, nil
}

// validateCalendar checks Period and TimeZone: a calendar quota is a fixed
// window whose length the calendar sets, in a zone the fleet shares.
func (r Rule) validateCalendar(bad func(string, ...any) error) error {
	if !r.calendar() {
		if r.TimeZone != "" {
			return bad("TimeZone %q is set without a Period: a time zone places calendar periods; set Period (day, week or month), or remove TimeZone", r.TimeZone)
		}
		return nil
	}
	switch {
	case r.Period > Month:
		return bad("unknown Period %d: use policy.Day, policy.Week or policy.Month", uint8(r.Period))
	case r.Window != 0:
		return bad("Window %v is set with Period %v: the calendar sets a period's length; remove Window", r.Window, r.Period)
	case r.Algorithm != FixedWindow:
		return bad("Period %v is set on a %v rule: a calendar period is counted as one fixed window; set Algorithm to policy.FixedWindow", r.Period, r.Algorithm)
	case r.Ceiling != 0 || r.Capacity != "":
		return bad("Period %v is set with a Ceiling or Capacity: a calendar quota is not elastic; remove them", r.Period)
	case r.Deny || r.InFlight:
		return bad("Period %v is set with Deny or InFlight: neither counts per period; remove Period", r.Period)
	}
	if _, err := r.location(); err != nil {
		return bad("%v", err)
	}
	return nil
}
