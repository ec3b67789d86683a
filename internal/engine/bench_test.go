package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
)

// benchRules are Local rules of every algorithm with a capacity no
// benchmark exhausts at one instant (the log: a time advancing by its
// interval per check admits every check).
var benchRules = []policy.Rule{
	{Name: "sliding", Limit: policy.MaxLimit, Window: time.Hour, Mode: policy.Local},
	{Name: "gcra", Limit: 3_600_000_000, Window: time.Hour, Algorithm: policy.GCRA, Burst: policy.MaxLimit, Mode: policy.Local},
	{Name: "warmup", Limit: 1000, Window: time.Second, Algorithm: policy.TokenBucket, Burst: 86_000_000, WarmUp: time.Minute, Mode: policy.Local},
	{Name: "log", Limit: 1000, Window: time.Second, Algorithm: policy.SlidingLog, Mode: policy.Local},
}

// BenchmarkEngineCheck measures Engine.Check of one hot key, admitted, for
// every algorithm on the same footing: Local, reading the clock once per
// check (Config.Now, which advances by a millisecond per call).
func BenchmarkEngineCheck(b *testing.B) {
	ctx := context.Background()
	for _, rule := range benchRules {
		require.NoError(b, rule.Validate())
		b.Run(rule.Name, func(b *testing.B) {
			now := int64(1_800_000_000) * int64(time.Second)
			e, err := engine.New(engine.Config{
				Rule: rule, Keys: localcache.NewKeys(1 << 20),
				Now: func() int64 { now += int64(time.Millisecond); return now },
			})
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				if r, _ := e.Check(ctx, "hot", 1); !r.Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}
