package syncer

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/window"
)

// TestWaited: each reason a rule's check waited for counts in its own field
// of Stats.Waits; an unknown reason counts nowhere.
func TestWaited(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: the syncer is not started
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(Config{Client: c, Prefix: "t", InstanceID: "A", Interval: time.Hour, Timeout: time.Second},
		syncport.RuleConfig{Name: "api", Geometry: window.NewSliding(time.Minute, 6), Limit: 100, Keys: noKeys{}})
	require.NoError(t, err)
	r := s.rule("api")
	for why, n := range map[syncport.Why]int{syncport.WhyNear: 1, syncport.WhyNew: 2, syncport.WhyStart: 3, syncport.WhyLease: 4, syncport.WhyCap: 5, syncport.NumWhy: 6} {
		for range n {
			r.Waited(why)
		}
	}
	assert.Equal(t, syncport.Waits{Near: 1, New: 2, Start: 3, Lease: 4, Cap: 5}, s.Stats().Waits)
}
