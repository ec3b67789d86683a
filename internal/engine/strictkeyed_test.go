package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/apierr"
	"github.com/sluicehq/sluice/policy"
)

// TestStrictKeyedStoreDown: a Strict TokenBucket, GCRA or SlidingLog rule
// whose store is down decides by the failure mode: FailLocal admits this
// instance's share (Limit/N̂ of a full bucket or log), FailOpen admits
// everything, FailClosed denies with apierr.ErrStoreUnavailable.
func TestStrictKeyedStoreDown(t *testing.T) {
	t.Parallel()
	for _, a := range []policy.Algorithm{policy.TokenBucket, policy.GCRA, policy.SlidingLog} {
		for _, tc := range []struct {
			mode policy.FailureMode
			want int
		}{
			{policy.FailLocal, 5},
			{policy.FailOpen, 20},
			{policy.FailClosed, 0},
		} {
			t.Run(fmt.Sprintf("%v/%v", a, tc.mode), func(t *testing.T) {
				t.Parallel()
				rule := policy.Rule{Name: "r", Limit: 10, Window: time.Minute, Algorithm: a, Mode: policy.Strict}
				c := &clock{t: 1_700_000_000_000_000_000}
				e := newEngine(t, rule, c, tc.mode)
				e.SetFleet(2, true)
				admitted := 0
				for i := 0; i < 20; i++ {
					d, err := e.Check(context.Background(), "k", 1)
					if tc.mode == policy.FailClosed {
						require.ErrorIs(t, err, apierr.ErrStoreUnavailable)
					} else {
						require.NoError(t, err)
					}
					if d.Allowed {
						admitted++
					} else {
						require.Positive(t, d.RetryAfter, "a denial says when to retry")
					}
				}
				require.Equal(t, tc.want, admitted)
				if tc.mode == policy.FailLocal {
					p := e.Peek("k")
					require.False(t, p.Allowed, "the local view, at the share")
					c.t += int64(time.Minute)
					p = e.Peek("k")
					require.True(t, p.Allowed)
					require.Equal(t, int64(5), p.Remaining, "the share of a full %v", a)
				}
			})
		}
	}
}
