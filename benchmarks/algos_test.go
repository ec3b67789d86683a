package benchmarks

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// The rules of BenchmarkAlgorithms. Every one is Local and decided on the
// published time: a rule whose resolution (its sub-window; for the per-key
// algorithms its interval Window/Limit) is under 10 ms reads the clock on
// every check instead, which costs what BenchmarkTimeNow measures.
const (
	// bucketLimit per window is an interval of 10 ms, the shortest on the
	// published time.
	bucketLimit  = 360_000
	bucketWindow = time.Hour
	// bucketBurst is a capacity no benchmark exhausts (Burst·T = 347 days,
	// under policy.MaxWindow).
	bucketBurst = 3_000_000_000
	// warmBurst is the largest capacity of a rule with a WarmUp at this
	// interval (a WarmUp rule's Burst·Interval is at most 24 hours: a day of intervals).
	warmBurst  = 8_640_000
	warmPeriod = time.Minute // 6000 intervals
	// warmFill is the cost of a warm-up key's first check on the allow
	// path: more than its stored permits (about 6000), so that the timed
	// loop meets it warm (see algoRule).
	warmFill = 12_000
	// algoDenyLimit per algoDenyWindow is the rule of the deny paths of the
	// windows and the log; the first check of each key costs the whole
	// limit.
	algoDenyLimit  = 100
	algoDenyWindow = time.Minute
)

// algoNames are the algorithms of BenchmarkAlgorithms, in the report's
// order.
var algoNames = []string{"sliding", "weighted", "fixed", "tokenbucket", "gcra", "warmup", "log"}

// algoRule returns the rule of algorithm name on path, the cost of the first
// check of each key in the setup, and whether the pair is measured on set.
//
// The allow path needs a rule that admits every check of the run. The
// windows and the buckets without a warm-up have one on every set. A WarmUp
// admits at most Burst (a day of intervals, 8.64M at 10 ms) at once: enough
// for 10k keys, not for a hot key checked tens of millions of times, which
// is measured on the deny path only. Its keys are filled with more than
// their stored permits, so that the loop meets them warm (no stored permits:
// the state of a key used at its rate for longer than the warm-up period;
// the ramp of a cold key takes window.WarmUp's float path, measured by
// localcache's BenchmarkWarmTablePaths). A SlidingLog admits at most its
// Limit (≤ 1024) per window: deny path only. The deny path fills each key
// with its whole capacity in one check.
func algoRule(name, path, set string) (rule policy.Rule, first int64, ok bool) {
	allow := path == "allow"
	rule = policy.Rule{Name: ruleName, Mode: policy.Local, Limit: allowLimit, Window: window}
	first = 1
	switch name {
	case "sliding", "weighted", "fixed":
		rule.Algorithm = map[string]policy.Algorithm{"sliding": policy.SlidingWindow, "weighted": policy.WeightedWindow, "fixed": policy.FixedWindow}[name]
		if !allow {
			rule.Limit, rule.Window, first = algoDenyLimit, algoDenyWindow, algoDenyLimit
		}
		return rule, first, allow || name == "sliding"
	case "tokenbucket", "gcra":
		rule.Algorithm = map[string]policy.Algorithm{"tokenbucket": policy.TokenBucket, "gcra": policy.GCRA}[name]
		rule.Limit, rule.Window, rule.Burst = bucketLimit, bucketWindow, bucketBurst
		return rule, first, allow
	case "warmup":
		rule.Algorithm, rule.Limit, rule.Window, rule.Burst, rule.WarmUp = policy.GCRA, bucketLimit, bucketWindow, warmBurst, warmPeriod
		if allow {
			return rule, warmFill, set != "hot"
		}
		return rule, warmBurst, true
	case "log":
		rule.Algorithm, rule.Limit, rule.Window, first = policy.SlidingLog, algoDenyLimit, algoDenyWindow, algoDenyLimit
		return rule, first, !allow
	}
	panic("unknown algorithm " + name)
}

// BenchmarkAlgorithms measures Limiter.Allow for a Local rule of each
// algorithm (algoNames; see algoRule for the rules) on the hot key and the
// 10k keys, serial and parallel, with the floor beside them in the same
// process. Names: set=<hot|10k>/path=<allow|deny>/algo=<floor|name>/
// mode=<serial|parallel>. The allow path admits every check, the deny path
// denies every one; a pair that cannot stay on its path for a whole run is
// left out (see algoRule). Every loop is metered as BenchmarkCheck's are.
func BenchmarkAlgorithms(b *testing.B) {
	for _, set := range []string{"hot", "10k"} {
		b.Run("set="+set, func(b *testing.B) {
			ks := keySet(set)
			for _, path := range []string{"allow", "deny"} {
				b.Run("path="+path, func(b *testing.B) {
					if path == "allow" {
						b.Run("algo=floor", func(b *testing.B) { benchFloor(b, ks) })
					}
					for _, name := range algoNames {
						rule, first, ok := algoRule(name, path, set)
						if !ok {
							continue
						}
						b.Run("algo="+name, func(b *testing.B) { benchAlgo(b, ks, rule, first, path == "allow") })
					}
				})
			}
		})
	}
}

// benchAlgo measures rule's checks on ks, each of which must be admitted
// (want) or denied. Setup: one check of cost first on every key, then on
// the deny path one more (denied), which settles a window's cached denial.
func benchAlgo(b *testing.B, ks *KeySet, rule policy.Rule, first int64, want bool) {
	l := newAlgoLimiter(b, ks, rule, first, want)
	ctx := context.Background()
	s, mask := ks.Sample, ks.Mask
	b.Run("mode=serial", func(b *testing.B) {
		b.ReportAllocs()
		cm := meter(b, true)
		for i := 0; b.Loop(); i++ {
			if d, err := l.Allow(ctx, ruleName, s[i&mask]); d.Allowed != want || err != nil {
				b.Fatalf("%s: %s (%+v, %v)", s[i&mask], wantWord(want), d, err)
			}
		}
		cm.report()
	})
	b.Run("mode=parallel", func(b *testing.B) {
		b.ReportAllocs()
		var g atomic.Uint64
		cm := meter(b, false)
		defer cm.report()
		b.RunParallel(func(pb *testing.PB) {
			defer cm.loop()()
			i := ks.Start(g.Add(1))
			for pb.Next() {
				if d, err := l.Allow(ctx, ruleName, s[i&mask]); d.Allowed != want || err != nil {
					b.Errorf("%s: %s (%+v, %v)", s[i&mask], wantWord(want), d, err)
					return
				}
				i++
			}
		})
	})
}

// newAlgoLimiter builds and fills the limiter benchAlgo measures; b's
// cleanups close it.
func newAlgoLimiter(b *testing.B, ks *KeySet, rule policy.Rule, first int64, want bool) *sluice.Limiter {
	runtime.GC()
	l, err := sluice.New(sluice.Options{MaxKeys: 2 * len(ks.Keys)}, rule)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	fill(b, ks.Keys, 1, func(k string) error {
		d, err := l.AllowN(ctx, ruleName, k, first)
		if err == nil && !d.Allowed {
			err = fmt.Errorf("key %s denied while filling: %+v", k, d)
		}
		return err
	})
	if !want {
		flood(b, ks, func(k string) (bool, error) {
			d, err := l.Allow(ctx, ruleName, k)
			return d.Allowed, err
		})
	}
	runtime.GC()
	return l
}
