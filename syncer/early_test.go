package syncer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestEarlySync: a key whose admissions leave it half of its cap or less is
// synced at once in the background, with no check waiting and no sync cycle
// (the interval is an hour): its counts reach the store, are acknowledged
// (the cap is whole again), and, with leases, the store grants it a lease,
// so that the key goes on admitting past its cap without asking the store.
func TestEarlySync(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		leases bool
	}{
		{"with leases (Eventual)", true},
		{"without leases", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := redistest.Start(t).Client(t)
			r := newRule(t, "api", midGeometry(4), 1000, 10)
			r.cfg.Leases = tc.leases
			s := startSyncer(t, testConfig(c, "A"), r)

			admit(t, s, r, "k", 5) // the fifth asks
			require.Eventually(t, func() bool {
				_, own := estimate(t, r.Table, "k", s.Now())
				return own == 0
			}, 10*time.Second, time.Millisecond, "the early sync acknowledged the counts")
			st := s.Stats()
			assert.Equal(t, int64(1), st.EarlySyncs)
			assert.Zero(t, st.UrgentCycles, "no check waited")
			assert.Zero(t, st.Cycles, "no sync cycle ran")

			ref, ok := r.Table.Ref("k")
			require.True(t, ok)
			want := r.Table.Want(ref, s.Now())
			n := int64(0)
			for r.Table.AllowAt("k", s.Now(), 1).Status == 0 && n < 1000 {
				n++
			}
			if tc.leases {
				// The early sync wanted 2·max(5, cap 10) = 20, well within the
				// room: the key now holds that lease and would ask for twice it.
				assert.Equal(t, int64(40), want)
				assert.GreaterOrEqual(t, n, int64(10+20), "the lease on top of the cap")
			} else {
				assert.Equal(t, int64(20), want, "twice the cap")
				assert.GreaterOrEqual(t, n, int64(10))
			}
			flush(t, s)
			_, own := estimate(t, r.Table, "k", s.Now())
			assert.Zero(t, own)
		})
	}
}
