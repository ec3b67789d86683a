package keyname

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// TestSuffix pins the suffixes of stored Redis keys: a change here moves
// every rule's keys, so each must stay byte-identical.
func TestSuffix(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	cases := []struct {
		name string
		geo  window.Sliding
		want string
	}{
		{"sliding", window.NewSliding(time.Minute, 6), ":10000000"},
		{"fixed", window.NewFixed(time.Second), ":1000000"},
		{"day", window.NewCalendar(policy.Day, berlin), ":day@Europe/Berlin"},
		{"week", window.NewCalendar(policy.Week, time.UTC), ":week@UTC"},
		{"month", window.NewCalendar(policy.Month, berlin), ":month@Europe/Berlin"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, Suffix(tc.geo))
		})
	}
}

// TestPeriodNames pins keyname's own names for the periods, which must not
// follow policy's text.
func TestPeriodNames(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "day", periodName(policy.Day))
	assert.Equal(t, "week", periodName(policy.Week))
	assert.Equal(t, "month", periodName(policy.Month))
	assert.Equal(t, "period200", periodName(policy.Period(200)))
}

// TestKeys pins whole stored key names: a window rule's counts and an
// in-flight rule's slot leases, the limiter key percent-encoded inside the
// hash tag.
func TestKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, got, want string
	}{
		{"window", Window("sluice", "api", "user:42", window.NewSliding(time.Minute, 6)), "sluice:{api:user%3A42}:10000000"},
		{"calendar", Window("p", "daily", "a b", window.NewCalendar(policy.Day, time.UTC)), "p:{daily:a%20b}:day@UTC"},
		{"in-flight", InFlight("sluice", "conc", "k}{"), "sluice:inflight:{conc:k%7D%7B}"},
		{"in-flight tag", InFlightTag("sluice", "conc"), "sluice:inflight:{conc:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, tc.got)
		})
	}
}

// TestStrictSuffixes pins what follows the hash tag of a GCRA or
// TokenBucket rule's keys and of a Strict SlidingLog's.
func TestStrictSuffixes(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "p:{r:", Tag("p", "r"))
	assert.Equal(t, ":gcra:100000000:10", GCRA(int64(100*time.Millisecond), 10))
	assert.Equal(t, ":log:60000000", Log(60_000_000))
}
