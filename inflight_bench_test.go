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

// BenchmarkAcquireRelease is an Acquire and its Release on the local path
// (an InFlight rule of a limiter without a store): no allocation.
func BenchmarkAcquireRelease(b *testing.B) {
	l, err := sluice.New(sluice.Options{}, policy.Rule{Name: "uploads", Limit: 1 << 20, InFlight: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	b.Run("one-key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, d, err := l.Acquire(ctx, "uploads", "k")
			if err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
			s.Release()
		}
	})
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	b.Run("parallel-1024-keys", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				s, d, err := l.Acquire(ctx, "uploads", keys[i&1023])
				if err != nil || !d.Allowed {
					b.Error(d, err)
					return
				}
				s.Release()
				i++
			}
		})
	})
}

// BenchmarkAcquireReleaseFleet is an Acquire and its Release of a fleet
// rule: two round trips to a local redis-server.
func BenchmarkAcquireReleaseFleet(b *testing.B) {
	srv := redistest.Start(b)
	l, err := sluice.New(sluice.Options{Redis: srv.Client(b), Timeout: time.Second}, policy.Rule{Name: "uploads", Limit: 1 << 20, InFlight: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, d, err := l.Acquire(ctx, "uploads", "k")
		if err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
		s.Release()
	}
}
