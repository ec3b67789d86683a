package window_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// TestCalendarPeriods checks the period that holds a local time, and its
// bounds, across daylight-saving changes and month ends in two zones: a
// period starts at local midnight and lasts as long as the calendar says.
func TestCalendarPeriods(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		zone       string
		period     policy.Period
		at         string // local time inside the period
		start, end string // local, as the period's first instant and its end
		length     time.Duration
	}{
		{"NY spring forward day", "America/New_York", policy.Day, "2026-03-08 12:00", "2026-03-08 00:00", "2026-03-09 00:00", 23 * time.Hour},
		{"NY fall back day", "America/New_York", policy.Day, "2026-11-01 01:30", "2026-11-01 00:00", "2026-11-02 00:00", 25 * time.Hour},
		{"NY plain day", "America/New_York", policy.Day, "2026-03-07 23:59", "2026-03-07 00:00", "2026-03-08 00:00", 24 * time.Hour},
		{"Berlin spring forward day", "Europe/Berlin", policy.Day, "2026-03-29 03:00", "2026-03-29 00:00", "2026-03-30 00:00", 23 * time.Hour},
		{"Berlin fall back day", "Europe/Berlin", policy.Day, "2026-10-25 02:30", "2026-10-25 00:00", "2026-10-26 00:00", 25 * time.Hour},
		{"NY week with the change", "America/New_York", policy.Week, "2026-03-08 12:00", "2026-03-02 00:00", "2026-03-09 00:00", 167 * time.Hour},
		{"Berlin week with the change", "Europe/Berlin", policy.Week, "2026-10-26 00:00", "2026-10-26 00:00", "2026-11-02 00:00", 168 * time.Hour},
		{"Berlin week ending with the change", "Europe/Berlin", policy.Week, "2026-10-25 23:59", "2026-10-19 00:00", "2026-10-26 00:00", 169 * time.Hour},
		{"NY February", "America/New_York", policy.Month, "2026-02-28 23:59", "2026-02-01 00:00", "2026-03-01 00:00", 28 * 24 * time.Hour},
		{"Berlin February", "Europe/Berlin", policy.Month, "2026-02-28 23:59", "2026-02-01 00:00", "2026-03-01 00:00", 28 * 24 * time.Hour},
		{"NY March", "America/New_York", policy.Month, "2026-03-01 00:00", "2026-03-01 00:00", "2026-04-01 00:00", 31*24*time.Hour - time.Hour},
		{"Berlin October", "Europe/Berlin", policy.Month, "2026-10-31 23:59", "2026-10-01 00:00", "2026-11-01 00:00", 31*24*time.Hour + time.Hour},
		{"NY December", "America/New_York", policy.Month, "2026-12-31 23:59", "2026-12-01 00:00", "2027-01-01 00:00", 31 * 24 * time.Hour},
		{"Berlin new year's day", "Europe/Berlin", policy.Day, "2027-01-01 00:00", "2027-01-01 00:00", "2027-01-02 00:00", 24 * time.Hour},
		{"Berlin Dec 31", "Europe/Berlin", policy.Day, "2026-12-31 23:59", "2026-12-31 00:00", "2027-01-01 00:00", 24 * time.Hour},
		{"UTC leap February", "UTC", policy.Month, "2028-02-29 12:00", "2028-02-01 00:00", "2028-03-01 00:00", 29 * 24 * time.Hour},
		{"before 1970", "UTC", policy.Week, "1969-12-31 12:00", "1969-12-29 00:00", "1970-01-05 00:00", 168 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			loc := mustZone(t, tt.zone)
			local := func(s string) int64 {
				v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
				require.NoError(t, err)
				return v.UnixNano()
			}
			g := window.NewCalendar(tt.period, loc)
			p, zone := g.Period()
			assert.Equal(t, tt.period, p)
			assert.Same(t, loc, zone)
			at := local(tt.at)
			k := g.Index(at)
			start, end := g.Start(k), g.Start(k+1)
			assert.Equal(t, time.Unix(0, local(tt.start)).In(loc), time.Unix(0, start).In(loc), "start")
			assert.Equal(t, time.Unix(0, local(tt.end)).In(loc), time.Unix(0, end).In(loc), "end")
			assert.Equal(t, tt.length, time.Duration(end-start))
			assert.Equal(t, k, g.Index(start), "the first instant is in the period")
			assert.Equal(t, k, g.Index(end-1), "the last instant is in the period")
			assert.Equal(t, k+1, g.Index(end), "the end starts the next period")
			assert.Equal(t, k-1, g.Index(start-1), "the instant before is in the period before")

			// The geometry: an admission resets, and a full window retries,
			// at the period's end.
			assert.Equal(t, time.Duration(end-at), g.ResetAfter(at))
			count := func(j int64) int64 { return map[bool]int64{true: 5}[j == k] }
			assert.Equal(t, time.Duration(end-at), g.RetryAfter(at, 5, 1, count))
			assert.Equal(t, time.Duration(end-at), g.ResetAt(at, count))
			assert.Equal(t, time.Duration(0), g.RetryAfter(at, 6, 1, count))
			assert.InDelta(t, float64(at-start)/float64(end-start), g.Phase(at), 1e-9)
		})
	}
}

// TestCalendarContiguous walks two years in steps that fall at every
// minute of the day, in zones whose changes fall at midnight (Santiago
// skips it, Havana repeats an hour into it) and in the usual ones: every
// instant is in exactly one period, periods follow each other without gap
// or overlap, and each starts at the first instant of a local date.
func TestCalendarContiguous(t *testing.T) {
	t.Parallel()
	zones := []string{"America/New_York", "Europe/Berlin", "America/Santiago", "America/Havana", "Australia/Lord_Howe", "Asia/Kolkata", "UTC"}
	for _, zone := range zones {
		for _, p := range []policy.Period{policy.Day, policy.Week, policy.Month} {
			t.Run(zone, func(t *testing.T) {
				t.Parallel()
				loc := mustZone(t, zone)
				g := window.NewCalendar(p, loc)
				from := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
				to := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
				step := int64(71*time.Minute + 13*time.Second)
				prevK, prevEnd := int64(0), int64(0)
				for at := from; at < to; at += step {
					k := g.Index(at)
					start, end := g.Start(k), g.Start(k+1)
					require.True(t, start <= at && at < end, "%v not in period %d [%v, %v)", time.Unix(0, at).In(loc), k, time.Unix(0, start).In(loc), time.Unix(0, end).In(loc))
					require.LessOrEqual(t, end-start, int64(g.Window()))
					if prevEnd != 0 && k != prevK {
						require.Equal(t, prevK+1, k, "periods are consecutive")
						require.Equal(t, prevEnd, start, "no gap or overlap")
					}
					_, _, d := time.Unix(0, start).In(loc).Date()
					_, _, dBefore := time.Unix(0, start-1).In(loc).Date()
					require.NotEqual(t, d, dBefore, "a period starts at the first instant of a date")
					prevK, prevEnd = k, end
				}
			})
		}
	}
}

// TestPeriodNone: the geometries that are not calendar quotas have no
// period.
func TestPeriodNone(t *testing.T) {
	t.Parallel()
	for _, g := range []window.Sliding{window.NewSliding(time.Minute, 6), window.NewWeighted(time.Minute, 6), window.NewFixed(time.Minute)} {
		p, zone := g.Period()
		assert.Zero(t, p)
		assert.Nil(t, zone)
	}
}
