package rulegeo

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/policy"
)

func TestGeometry(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		rule     policy.Rule
		calendar bool
		buckets  int
		sub      time.Duration
	}{
		{"sliding default precision", policy.Rule{Window: time.Second}, false, policy.DefaultPrecision, 100 * time.Millisecond},
		{"sliding precision 1", policy.Rule{Window: time.Second, Precision: 1}, false, 1, time.Second},
		{"sliding precision 60", policy.Rule{Window: time.Minute, Precision: 60}, false, 60, time.Second},
		{"sliding precision 64", policy.Rule{Window: time.Second, Precision: 64}, false, 64, 15625 * time.Microsecond},
		{"weighted", policy.Rule{Window: time.Minute, Algorithm: policy.WeightedWindow, Precision: 2}, false, 2, 30 * time.Second},
		{"fixed", policy.Rule{Window: time.Second, Algorithm: policy.FixedWindow}, false, 1, time.Second},
		{"fixed ignores precision", policy.Rule{Window: time.Minute, Algorithm: policy.FixedWindow, Precision: 30}, false, 1, time.Minute},
		{"token bucket", policy.Rule{Window: time.Minute, Algorithm: policy.TokenBucket}, false, 1, time.Minute},
		{"gcra", policy.Rule{Window: time.Minute, Algorithm: policy.GCRA}, false, 1, time.Minute},
		{"sliding log", policy.Rule{Window: time.Minute, Algorithm: policy.SlidingLog}, false, 1, time.Minute},
		{"calendar day", policy.Rule{Algorithm: policy.FixedWindow, Period: policy.Day}, true, 1, 24 * time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.calendar, Calendar(tt.rule))
			assert.Equal(t, tt.buckets, Buckets(tt.rule))
			assert.Equal(t, tt.sub, SubWindow(tt.rule))
		})
	}
	assert.Equal(t, 10, policy.DefaultPrecision)
}

func TestLocation(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	for _, tt := range []struct {
		zone string
		want *time.Location
	}{
		{"", time.UTC},
		{"UTC", time.UTC},
		{"Europe/Berlin", berlin},
		{"Local", nil},
		{"Nowhere/Atlantis", nil},
	} {
		t.Run(tt.zone, func(t *testing.T) {
			t.Parallel()
			r := policy.Rule{Name: "q", Algorithm: policy.FixedWindow, Period: policy.Day, TimeZone: tt.zone, Limit: 1}
			loc, err := Location(r)
			// Location refuses exactly what Validate refuses.
			assert.Equal(t, tt.want == nil, err != nil, "Location's error: %v", err)
			assert.Equal(t, tt.want == nil, r.Validate() != nil, "Validate's error")
			if tt.want != nil {
				assert.Equal(t, tt.want.String(), loc.String())
			}
		})
	}
}
