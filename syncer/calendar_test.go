package syncer

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/keyname"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// TestLuaBucketPeriod runs the scripts' bucket_of on a throwaway store, on
// the store's own clock: for a calendar quota it takes the caller's period
// while the store's time is inside it, the one after from its end on, the
// one before before its start; for the other rules it is ⌊now/sub⌋.
func TestLuaBucketPeriod(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	require.NoError(t, err)
	us := now.UnixMicro()
	hour := int64(time.Hour / time.Microsecond)
	period := func(k, start, end int64) string {
		return "c" + strconv.FormatInt(k, 10) + "," + strconv.FormatInt(start, 10) + "," + strconv.FormatInt(end, 10)
	}
	tests := []struct {
		name string
		arg  string
		want int64
	}{
		{"inside", period(20500, us-hour, us+hour), 20500},
		{"past its end", period(20500, us-2*hour, us-1), 20501},
		{"before its start", period(-3, us+hour, us+2*hour), -4},
		{"a sub-window", "86400000000", us / 86_400_000_000}, // unless the store's day ends meanwhile
	}
	script := luaBucket + "local t = redis.call('TIME')\nreturn bucket_of(tonumber(t[1]) * 1000000 + tonumber(t[2]), ARGV[1])"
	for _, tt := range tests {
		v, err := c.Eval(ctx, script, nil, tt.arg).Int64()
		require.NoError(t, err, tt.name)
		assert.Contains(t, []int64{tt.want, tt.want + 1}, v, tt.name)
		if tt.name != "a sub-window" {
			assert.Equal(t, tt.want, v, tt.name)
		}
	}
}

// TestSubArgPeriod: a calendar rule's scripts get its period at the
// caller's time and the period's bounds in µs, made once per period; its
// keys end in the calendar, the others' in the sub-window. Not parallel:
// AllocsPerRun counts every goroutine's.
func TestSubArgPeriod(t *testing.T) {
	loc, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	geo := window.NewCalendar(policy.Day, loc)
	r := &windowRule{geo: geo, cal: true}
	at := time.Date(2026, 10, 25, 12, 0, 0, 0, loc).UnixNano()
	k := geo.Index(at)
	start := time.Date(2026, 10, 25, 0, 0, 0, 0, loc).UnixMicro()
	end := time.Date(2026, 10, 26, 0, 0, 0, 0, loc).UnixMicro()
	assert.Equal(t, "c"+strconv.FormatInt(k, 10)+","+strconv.FormatInt(start, 10)+","+strconv.FormatInt(end, 10), r.subArg(at))
	assert.Equal(t, int64(25*time.Hour/time.Microsecond), end-start)
	first := r.subArg(at)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = r.subArg(at + int64(time.Hour)) }), "made once per period")
	assert.Equal(t, first, r.subArg(at+int64(time.Hour)))
	assert.NotEqual(t, first, r.subArg(end*1000))
	assert.Equal(t, ":day@Europe/Berlin", keyname.Suffix(geo))
	assert.Equal(t, ":100000", keyname.Suffix(window.NewSliding(time.Second, 10)))
}
