package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/layer"
	"github.com/sluicehq/sluice/internal/vclock"
	"github.com/sluicehq/sluice/policy"
)

// TestRuleSetIsTheMiddleware: a layer.RuleSet (what grpclimit checks)
// checked by hand and the middleware over another limiter of the same
// rules on the same virtual clock decide the same and send the same field
// values, byte for byte (but for the wall-clock X-RateLimit-Reset, which
// is parsed), layered and alone, to a denial.
func TestRuleSetIsTheMiddleware(t *testing.T) {
	t.Parallel()
	rules := []policy.Rule{
		{Name: "ip", Limit: 4, Window: time.Minute},
		{Name: "trial", Limit: 2, Window: time.Minute, Shadow: true},
		{Name: "tenant", Limit: 3, Window: 10 * time.Second, Soft: 0.5},
	}
	for _, names := range [][]string{{"ip"}, {"trial", "ip", "tenant"}} {
		t.Run(strings.Join(names, "+"), func(t *testing.T) {
			t.Parallel()
			c := &vclock.Clock{}
			c.NS.Store(1_800_000_000 * int64(time.Second))
			rs, err := layer.NewRuleSet(clockLimiter(t, c, rules...), names...)
			require.NoError(t, err)
			require.Equal(t, len(names), rs.Len())
			var route []httplimit.Rule
			for i, n := range names {
				assert.Equal(t, n, rs.Name(i))
				route = append(route, httplimit.Rule{Name: n})
			}
			mw, err := httplimit.New(httplimit.Config{Limiter: clockLimiter(t, c, rules...), ErrorMode: httplimit.ErrorReject,
				Routes: []httplimit.Route{{Pattern: "/", Rules: route}}, Key: xKey})
			require.NoError(t, err)
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			keys := make([]string, len(names))
			for i := range keys {
				keys[i] = "k"
			}
			denied := 0
			for i := range 7 {
				res, err := rs.Check(context.Background(), keys, 1, layer.AllFields)
				require.NoError(t, err)
				w := httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.Header.Set("X-Key", "k")
				h.ServeHTTP(w, r)
				status := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[res.Decision.Allowed]
				require.Equal(t, status, w.Code, "check %d", i+1)
				if !res.Decision.Allowed {
					denied++
					assert.GreaterOrEqual(t, res.Denied, 0)
				} else {
					assert.Equal(t, -1, res.Denied)
				}
				for f, name := range layer.FieldNames {
					v := res.Values.Field(f)
					if name != "X-Ratelimit-Reset" {
						assert.Equal(t, w.Header().Get(name), v, "check %d: %s", i+1, name)
						continue
					}
					require.NotEmpty(t, v)
					hdr := http.Header{name: {v}}
					assert.InDelta(t, sfInteger(t, w.Header(), name), sfInteger(t, hdr, name), 1, "check %d", i+1)
				}
				c.NS.Add(int64(time.Second))
			}
			assert.Positive(t, denied)

			res, err := rs.Check(context.Background(), keys, 1, 0)
			require.NoError(t, err)
			assert.Zero(t, res.Values.Count(), "no field asked, none built")
		})
	}
}
