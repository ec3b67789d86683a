package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// TestCalendarLocal: on a virtual clock, a Local calendar quota admits its
// Limit per period and no more, starts afresh at the local midnight that
// ends a period — across daylight-saving changes (23- and 25-hour days) and
// month ends, in two zones — and says so: an admission's ResetAfter and a
// denial's RetryAfter run to the period's end.
func TestCalendarLocal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		zone   string
		period policy.Period
		start  string // local: the period's first instant
		end    string // local: the next period's first instant
	}{
		{"NY 23-hour day", "America/New_York", policy.Day, "2026-03-08 00:00", "2026-03-09 00:00"},
		{"NY 25-hour day", "America/New_York", policy.Day, "2026-11-01 00:00", "2026-11-02 00:00"},
		{"Berlin 23-hour day", "Europe/Berlin", policy.Day, "2026-03-29 00:00", "2026-03-30 00:00"},
		{"Berlin 25-hour day", "Europe/Berlin", policy.Day, "2026-10-25 00:00", "2026-10-26 00:00"},
		{"NY Feb 28 to Mar 1", "America/New_York", policy.Day, "2026-02-28 00:00", "2026-03-01 00:00"},
		{"Berlin Dec 31 to Jan 1", "Europe/Berlin", policy.Day, "2026-12-31 00:00", "2027-01-01 00:00"},
		{"NY February", "America/New_York", policy.Month, "2026-02-01 00:00", "2026-03-01 00:00"},
		{"Berlin February", "Europe/Berlin", policy.Month, "2026-02-01 00:00", "2026-03-01 00:00"},
		{"NY December", "America/New_York", policy.Month, "2026-12-01 00:00", "2027-01-01 00:00"},
		{"Berlin December", "Europe/Berlin", policy.Month, "2026-12-01 00:00", "2027-01-01 00:00"},
		{"Berlin March (23 hours short)", "Europe/Berlin", policy.Month, "2026-03-01 00:00", "2026-04-01 00:00"},
		{"NY week of the change", "America/New_York", policy.Week, "2026-11-02 00:00", "2026-11-09 00:00"},
		{"Berlin week of the change", "Europe/Berlin", policy.Week, "2026-03-23 00:00", "2026-03-30 00:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			loc, err := time.LoadLocation(tt.zone)
			require.NoError(t, err)
			local := func(s string) int64 {
				v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
				require.NoError(t, err)
				return v.UnixNano()
			}
			start, end := local(tt.start), local(tt.end)
			const limit = 5
			rule := policy.Rule{Name: "quota", Limit: limit, Algorithm: policy.FixedWindow, Period: tt.period, TimeZone: tt.zone, Mode: policy.Local}
			c := newFakeClock(start - int64(time.Second))
			l := newAlgoLimiter(t, c, rule)
			ctx := context.Background()

			// The last second of the period before: its quota is its own.
			for range limit {
				d, err := l.Allow(ctx, "quota", "k")
				require.NoError(t, err)
				require.True(t, d.Allowed)
				require.Equal(t, time.Second, d.ResetAfter, "the period before ends at %s", tt.start)
			}
			// The period: Limit, spread from its first to its last instant.
			at := []int64{start, start + (end-start)/3, end - (end-start)/3, end - int64(time.Minute), end - 1}
			for i, t0 := range at {
				c.set(t0)
				d, err := l.Allow(ctx, "quota", "k")
				require.NoError(t, err)
				require.True(t, d.Allowed, "check %d at %v", i, time.Unix(0, t0).In(loc))
				assert.Equal(t, int64(limit-1-i), d.Remaining)
				assert.Equal(t, time.Duration(end-t0), d.ResetAfter, "an admission resets at the period's end")
			}
			c.set(end - int64(time.Minute))
			d, err := l.Allow(ctx, "quota", "k")
			require.NoError(t, err)
			require.False(t, d.Allowed, "the period's Limit is spent")
			assert.Equal(t, time.Minute, d.RetryAfter, "a denial retries at the period's end")
			assert.Equal(t, time.Minute, d.ResetAfter)
			c.set(end - 1)
			d, err = l.Allow(ctx, "quota", "k")
			require.NoError(t, err)
			require.False(t, d.Allowed, "the period's last instant is still the period")
			assert.Equal(t, time.Duration(1), d.RetryAfter)

			// The next period starts whole at local midnight.
			c.set(end)
			d, err = l.Allow(ctx, "quota", "k")
			require.NoError(t, err)
			require.True(t, d.Allowed, "the next period starts at %s", tt.end)
			assert.Equal(t, int64(limit-1), d.Remaining)
			assert.Greater(t, d.ResetAfter, 22*time.Hour)
		})
	}
}

// TestCalendarRefused: a calendar rule New cannot run is an error at
// start-up that says what to fix.
func TestCalendarRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rule policy.Rule
		want string
	}{
		{"unknown zone", policy.Rule{Name: "q", Limit: 1, Algorithm: policy.FixedWindow, Period: policy.Day, TimeZone: "Mars/Olympus"}, "not a known time zone"},
		{"Local zone", policy.Rule{Name: "q", Limit: 1, Algorithm: policy.FixedWindow, Period: policy.Day, TimeZone: "Local"}, "each instance's own zone"},
		{"bad period", policy.Rule{Name: "q", Limit: 1, Algorithm: policy.FixedWindow, Period: 9}, "unknown Period"},
		{"a window too", policy.Rule{Name: "q", Limit: 1, Window: time.Hour, Algorithm: policy.FixedWindow, Period: policy.Day}, "remove Window"},
		{"sliding", policy.Rule{Name: "q", Limit: 1, Period: policy.Week}, "set Algorithm to policy.FixedWindow"},
		{"zone alone", policy.Rule{Name: "q", Limit: 1, Window: time.Hour, TimeZone: "UTC"}, "without a Period"},
		{"deny", policy.Rule{Name: "q", Deny: true, Algorithm: policy.FixedWindow, Period: policy.Day}, "Deny or InFlight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := sluice.New(sluice.Options{}, tt.rule)
			require.ErrorIs(t, err, policy.ErrInvalidRule)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestCalendarDoesNotAllocate: a check of a calendar quota allocates
// nothing, admitted or denied, Local and Eventual (the syncer idle: a long
// interval). Not parallel: AllocsPerRun counts every goroutine's.
func TestCalendarDoesNotAllocate(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range []policy.Mode{policy.Local, policy.Eventual} {
		t.Run(mode.String(), func(t *testing.T) {
			open := policy.Rule{Name: "open", Limit: policy.MaxLimit, Algorithm: policy.FixedWindow, Period: policy.Day, TimeZone: "Europe/Berlin", Mode: mode}
			full := policy.Rule{Name: "full", Limit: 1, Algorithm: policy.FixedWindow, Period: policy.Month, TimeZone: "America/New_York", Mode: mode}
			opts := sluice.Options{}
			if mode == policy.Eventual {
				opts = sluice.Options{Redis: srv.Client(t), Prefix: "cal-allocs", ErrorBudget: 1, SyncInterval: time.Hour}
			}
			l, err := sluice.New(opts, open, full)
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			ctx := context.Background()
			keys := []string{"a", "b", "c"}
			for _, k := range keys {
				_, _ = l.Allow(ctx, "open", k)
				_, _ = l.Allow(ctx, "full", k)
			}
			i := 0
			require.Zero(t, testing.AllocsPerRun(2000, func() {
				d, _ := l.Allow(ctx, "open", keys[i%len(keys)])
				if !d.Allowed {
					t.Fatal("denied")
				}
				i++
			}), "admitted")
			if mode == policy.Local { // an Eventual denial on a full key may ask the store
				require.Zero(t, testing.AllocsPerRun(2000, func() {
					d, _ := l.Allow(ctx, "full", keys[i%len(keys)])
					if d.Allowed {
						t.Fatal("admitted")
					}
					i++
				}), "denied")
			}
		})
	}
}

// BenchmarkAllowCalendar measures a Local daily quota in a zone with
// daylight-saving changes, next to BenchmarkAllowLocal's hourly window.
func BenchmarkAllowCalendar(b *testing.B) {
	l, err := sluice.New(sluice.Options{}, policy.Rule{Name: "api", Limit: policy.MaxLimit, Algorithm: policy.FixedWindow, Period: policy.Day, TimeZone: "Europe/Berlin"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := l.Allow(ctx, "api", "k"); !d.Allowed {
			b.Fatal("denied")
		}
	}
}

// TestCalendarTiers: the override tiers of a calendar quota count per
// period too: a higher tier its own limit, a Deny tier's denials retry at
// the day's end, an Unlimited tier is admitted.
func TestCalendarTiers(t *testing.T) {
	t.Parallel()
	loc, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	at := time.Date(2026, 3, 29, 20, 0, 0, 0, loc) // 4 hours before the end of a 23-hour day
	c := newFakeClock(at.UnixNano())
	l := newAlgoLimiter(t, c, policy.Rule{
		Name: "quota", Limit: 1, Algorithm: policy.FixedWindow, Period: policy.Day, TimeZone: "Europe/Berlin", Mode: policy.Local,
		Overrides: []policy.Override{
			{Tier: "pro", Keys: []string{"pro"}, Limit: 3},
			{Tier: "blocked", Keys: []string{"bad"}, Deny: true},
			{Tier: "vip", Keys: []string{"vip"}, Unlimited: true},
		},
	})
	ctx := context.Background()
	for i := range 4 {
		d, err := l.Allow(ctx, "quota", "pro")
		require.NoError(t, err)
		assert.Equal(t, i < 3, d.Allowed, "pro check %d", i+1)
		assert.Equal(t, 4*time.Hour, d.ResetAfter)
	}
	d, err := l.Allow(ctx, "quota", "bad")
	require.NoError(t, err)
	assert.True(t, d.Blocked())
	assert.Positive(t, d.RetryAfter, "a blocked key is told to come back later")
	d, err = l.Allow(ctx, "quota", "vip")
	require.NoError(t, err)
	assert.True(t, d.Unlimited())
}
