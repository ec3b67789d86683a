package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/vclock"
	"github.com/sluicehq/sluice/policy"
)

// TestCalendarHeaders: the fields of a calendar quota say when its period
// ends: RateLimit's t, X-RateLimit-Reset and a denial's Retry-After run to
// the local midnight that ends the day (here a 25-hour day in Berlin, and
// the first day of a month in New York), and RateLimit-Policy gives the
// period's nominal length as w.
func TestCalendarHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		zone   string
		period policy.Period
		at     string // local time of the requests
		left   time.Duration
		w      int64
	}{
		{"Berlin 25-hour day", "Europe/Berlin", policy.Day, "2026-10-25 01:00", 24 * time.Hour, 86400},
		{"New York March", "America/New_York", policy.Month, "2026-03-01 00:00", 31*24*time.Hour - time.Hour, 30 * 86400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			loc, err := time.LoadLocation(tt.zone)
			require.NoError(t, err)
			at, err := time.ParseInLocation("2006-01-02 15:04", tt.at, loc)
			require.NoError(t, err)
			c := &vclock.Clock{}
			c.NS.Store(at.UnixNano())
			rule := policy.Rule{Name: "quota", Limit: 2, Algorithm: policy.FixedWindow, Period: tt.period, TimeZone: tt.zone, Mode: policy.Local}
			mw, err := httplimit.New(httplimit.Config{Limiter: clockLimiter(t, c, rule), ErrorMode: httplimit.ErrorReject,
				Routes: []httplimit.Route{{Pattern: "/", Rules: []httplimit.Rule{{Name: "quota"}}}}, Key: xKey})
			require.NoError(t, err)
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			secs := strconv.FormatInt(int64(tt.left/time.Second), 10)
			for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
				w := httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.Header.Set("X-Key", "k")
				h.ServeHTTP(w, r)
				require.Equal(t, want, w.Code, "request %d", i+1)
				assert.Equal(t, `"quota";q=2;w=`+strconv.FormatInt(tt.w, 10), w.Header().Get("RateLimit-Policy"))
				assert.Equal(t, `"quota";r=`+strconv.Itoa(max(1-i, 0))+`;t=`+secs, w.Header().Get("RateLimit"), "request %d", i+1)
				assert.InDelta(t, time.Now().Add(tt.left).Unix(), sfInteger(t, w.Header(), "X-RateLimit-Reset"), 2, "request %d", i+1)
				if want != http.StatusOK {
					assert.Equal(t, secs, w.Header().Get("Retry-After"))
				}
			}
		})
	}
}
