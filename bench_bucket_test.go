package sluice_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// BenchmarkAllowEventualBucket measures Allow on an Eventual GCRA's local
// path (the units the store leased: one compare-and-swap) next to the
// Eventual sliding window's fast path, in the same run, with a real Redis
// behind both. The rate, burst and error budget are large so that every
// check is admitted on the units held.
func BenchmarkAllowEventualBucket(b *testing.B) {
	srv := redistest.Start(b)
	rules := []policy.Rule{
		{Name: "window", Limit: policy.MaxLimit, Window: time.Hour},
		{Name: "gcra", Limit: 1_000_000_000, Window: time.Hour, Algorithm: policy.GCRA, Mode: policy.Eventual},
	}
	l, err := sluice.New(sluice.Options{Redis: srv.Client(b), ErrorBudget: 1}, rules...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	for _, n := range []int{1, 10_000} {
		keys := benchKeys(n)
		for _, r := range rules {
			for _, k := range keys { // track every key first: measure steady state
				if d, err := l.Allow(ctx, r.Name, k); err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
			}
			allowLoops(b, r.Name+"/"+strconv.Itoa(n)+"keys", l, r.Name, keys)
		}
	}
}
