package sluice_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// BenchmarkAllowOverrides measures a Local check of a rule with 10,000
// override keys in two tiers, for a key in a tier and a key in none,
// against the same rule without overrides: the override costs one map
// lookup and no allocation.
func BenchmarkAllowOverrides(b *testing.B) {
	var pro, internal []string
	for i := range 10_000 {
		if i%2 == 0 {
			pro = append(pro, "tenant-"+strconv.Itoa(i))
		} else {
			internal = append(internal, "tenant-"+strconv.Itoa(i))
		}
	}
	plain := policy.Rule{Name: "api", Limit: policy.MaxLimit / 2, Window: time.Hour, Mode: policy.Local}
	over := plain
	over.Overrides = []policy.Override{
		{Tier: "pro", Limit: policy.MaxLimit / 2, Keys: pro},
		{Tier: "internal", Unlimited: true, Keys: internal},
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		rule policy.Rule
		key  string
	}{
		{"no-overrides", plain, "someone"},
		{"overrides/key-in-none", over, "someone"},
		{"overrides/key-in-tier", over, "tenant-42"},
		{"overrides/unlimited-key", over, "tenant-43"},
	} {
		l, err := sluice.New(sluice.Options{}, bc.rule)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d, _ := l.Allow(ctx, "api", bc.key); !d.Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}

// BenchmarkSetRules measures replacing a set of 100 rules with the same
// geometry and new limits (every engine kept and retuned).
func BenchmarkSetRules(b *testing.B) {
	rules := make([]policy.Rule, 100)
	for i := range rules {
		rules[i] = policy.Rule{Name: "r" + strconv.Itoa(i), Limit: 100, Window: time.Minute}
	}
	l, err := sluice.New(sluice.Options{}, rules...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range rules {
			rules[j].Limit = 100 + int64(i%2)
		}
		if err := l.SetRules(rules...); err != nil {
			b.Fatal(err)
		}
	}
}
