package adaptive_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/adaptive"
)

// BenchmarkAcquireRelease is one admitted request: Acquire and Release
// with a sample for Gradient2, on the system clock.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, bc := range []struct {
		name string
		alg  adaptive.Algorithm
	}{
		{"Gradient2", &adaptive.Gradient2{}},
		{"AIMD", &adaptive.AIMD{Threshold: 1 << 40}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, err := adaptive.New(adaptive.Options{Algorithm: bc.alg, Initial: 1000, Max: 1000})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					s, err := l.Acquire(ctx, adaptive.Default)
					if err != nil || !s.OK() {
						b.Fatal("refused")
					}
					s.Release(adaptive.Success)
				}
			})
		})
	}
}

// BenchmarkShed is a refusal: the limit is full.
func BenchmarkShed(b *testing.B) {
	l, err := adaptive.New(adaptive.Options{Algorithm: fixed{}, Initial: 1})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	s, _ := l.Acquire(ctx, adaptive.Critical)
	defer s.Release(adaptive.Success)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if s, _ := l.Acquire(ctx, adaptive.Sheddable); s.OK() {
				b.Fatal("admitted")
			}
		}
	})
}
