package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/traffic"
	"github.com/sluicehq/sluice/policy"
)

// peerConfig is a small fleet's configuration of profile.
func peerConfig(profile string, d time.Duration) Config {
	rule := policy.Rule{Name: "r", Limit: 100, Window: time.Second, Mode: policy.Eventual}
	return Config{Rule: rule, Traffic: traffic.Params{Profile: profile, Rate: 4000, Duration: 10 * d, Window: time.Second,
		Sub: 100 * time.Millisecond, Limit: 100, Keys: 10, Zipf: 1, MaxCost: 1, Instances: 2, Workers: 2,
		Sync: 100 * time.Millisecond, Seed: 3}}
}

// TestRunPeer: a peer is checked on the scenario's schedule, cut to its
// own duration: the scheduled checks when paced, each of them timed; flat
// out, as many as it takes, 1 in 64 timed.
func TestRunPeer(t *testing.T) {
	t.Parallel()
	d := 200 * time.Millisecond
	for _, peer := range Peers {
		t.Run(peer, func(t *testing.T) {
			t.Parallel()
			cfg := peerConfig(traffic.Steady, d)
			res, err := RunPeer(context.Background(), cfg, peer, d)
			require.NoError(t, err)
			tp := cfg.Traffic
			tp.Duration = d
			want, _ := tp.Merged(0)
			assert.Equal(t, peer, res.Peer)
			assert.Equal(t, d, res.Duration)
			// A check still due when the worker, late, reaches the end
			// is not made, as in the fleet.
			assert.LessOrEqual(t, res.Checks, int64(len(want)), "the schedule's checks")
			assert.Positive(t, res.Checks)
			assert.Equal(t, res.Checks, int64(res.Latency.N), "every paced check timed")
			assert.Equal(t, 1, res.Every)

			flat, err := RunPeer(context.Background(), peerConfig(traffic.Throughput, d), peer, d)
			require.NoError(t, err)
			require.Positive(t, flat.Latency.N)
			assert.Greater(t, flat.Checks, int64(flat.Latency.N), "flat out, not every check timed")
			assert.LessOrEqual(t, flat.Latency.P50, flat.Latency.P999)
		})
	}
	_, err := RunPeer(context.Background(), peerConfig(traffic.Steady, d), "nope", d)
	assert.Error(t, err)
}
