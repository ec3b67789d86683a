package policy_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/syncer"
	"github.com/sluicehq/sluice/window"
)

// FuzzRuleValidate runs Validate on arbitrary field values. It must never
// panic. A rejection wraps ErrInvalidRule in a one-line message. An accepted
// rule must work everywhere a rule goes: a window rule builds a window
// geometry whose sub-windows are whole microseconds and add up to the
// Window, with the documented bucket count, and the local cache and the
// syncer (which keys Redis by the sub-window in µs) accept it; a TokenBucket
// or GCRA builds its math (window.NewGCRA, window.NewWarmUp, which panic on
// bad input) and its table, a SlidingLog its table; a Limiter takes it
// and admits a check of cost 1 and of cost MaxCost (Limit, or Burst) on a
// fresh key, and rejects cost MaxCost+1; the new algorithms are never
// accepted Eventual, and the syncer takes them Strict.
func FuzzRuleValidate(f *testing.F) {
	type seed struct {
		name      string
		limit     int64
		window    int64
		algorithm uint8
		precision int
		mode      uint8
		burst     int64
		warmUp    int64
	}
	for _, s := range []seed{
		{"api", 100, int64(time.Second), 0, 0, 0, 0, 0},
		{"login", 5, int64(15 * time.Minute), 0, 60, uint8(policy.Strict), 0, 0},
		{"fixed", 1, int64(time.Millisecond), uint8(policy.FixedWindow), 0, uint8(policy.Local), 0, 0},
		{"weighted", 100, int64(time.Minute), uint8(policy.WeightedWindow), 6, uint8(policy.Eventual), 0, 0},
		{"max", policy.MaxLimit, int64(policy.MaxWindow), 0, policy.MaxPrecision, uint8(policy.Eventual), 0, 0},
		{"x", policy.MaxLimit + 1, int64(time.Second), 0, 0, 0, 0, 0},
		{"x", 0, int64(time.Second), 0, 0, 0, 0, 0},
		{"x", -1, -1, 0, -1, 0, 0, 0},
		{"x", 10, int64(time.Second) + 1, 0, 0, 0, 0, 0},                        // not whole µs
		{"x", 10, int64(time.Second), 0, 7, 0, 0, 0},                            // 1s/7 not whole µs
		{"x", 10, int64(time.Microsecond) * 64, 0, 64, 0, 0, 0},                 // 1µs sub-windows, below MinWindow
		{"x", 10, int64(time.Second) + int64(time.Microsecond), 1, 99, 0, 0, 0}, // fixed ignores Precision
		{"x", 10, int64(policy.MaxWindow) + 1, 0, 0, 0, 0, 0},
		{"x", 10, math.MaxInt64, 0, 0, 0, 0, 0},
		{"x", 10, math.MinInt64, 2, 0, 4, 0, 0},
		{"a:b", 10, int64(time.Second), 0, 0, 0, 0, 0},
		{"", 10, int64(time.Second), 0, 0, 0, 0, 0},
		{"é", 10, int64(time.Second), 0, 0, 0, 0, 0},
		// The new algorithms and fields.
		{"tb", 100, int64(time.Second), uint8(policy.TokenBucket), 0, 0, 0, 0},
		{"gcra", 3, int64(time.Second), uint8(policy.GCRA), 0, uint8(policy.Local), 7, 0},
		{"gcra-max", 1_000_000, int64(time.Hour), uint8(policy.GCRA), 0, 0, policy.MaxLimit, 0},
		{"warm", 10, int64(time.Second), uint8(policy.GCRA), 0, 0, 0, int64(5 * time.Second)},
		{"warm-edge", 1000, int64(time.Second), uint8(policy.TokenBucket), 0, 0, 1000, int64(65536 * time.Millisecond)},
		{"log", policy.MaxLogLimit, int64(time.Minute), uint8(policy.SlidingLog), 0, uint8(policy.Strict), 0, 0},
		{"x", policy.MaxLogLimit + 1, int64(time.Minute), uint8(policy.SlidingLog), 0, 0, 0, 0},
		{"x", 10, int64(time.Second), 0, 0, 0, 5, 0},                                    // Burst on a window
		{"x", 10, int64(time.Second), uint8(policy.SlidingLog), 0, 0, 0, 1},             // WarmUp on a log
		{"x", 10, int64(time.Second), uint8(policy.GCRA), 10, 0, 0, 0},                  // Precision on a bucket
		{"x", 10, int64(time.Second), uint8(policy.GCRA), 0, 0, -1, 0},                  // Burst < 0
		{"x", 10, int64(time.Second), uint8(policy.GCRA), 0, 0, policy.MaxLimit + 1, 0}, // Burst > MaxLimit
		{"x", 10, int64(time.Second), uint8(policy.TokenBucket), 0, 0, 0, -1},           // WarmUp < 0
		{"x", 2_000_001, int64(time.Second), uint8(policy.GCRA), 0, 0, 0, 0},            // interval < 1µs
		{"x", 1, int64(policy.MaxWindow), uint8(policy.GCRA), 0, 0, 2, 0},               // refill > MaxWindow
		{"x", 1, int64(time.Hour), uint8(policy.GCRA), 0, 0, 25, int64(time.Hour)},      // warm-up debt > a day
		{"x", 10, math.MaxInt64, uint8(policy.GCRA), 0, 0, math.MaxInt64, math.MaxInt64},
		// Their modes.
		{"gcra-strict", 10, int64(time.Second), uint8(policy.GCRA), 0, uint8(policy.Strict), 3, 0},
		{"tb-strict", 1, int64(policy.MaxWindow / 8), uint8(policy.TokenBucket), 0, uint8(policy.Strict), 1, 0},
		{"x", 1, int64(policy.MaxWindow / 8), uint8(policy.TokenBucket), 0, uint8(policy.Strict), 2, 0}, // Burst·T > MaxStrictTolerance
		{"x", 10, int64(time.Second), uint8(policy.GCRA), 0, uint8(policy.Eventual), 0, 0},
		{"x", 10, int64(time.Second), uint8(policy.SlidingLog), 0, uint8(policy.Eventual), 0, 0},
		{"x", 10, int64(time.Second), uint8(policy.GCRA), 0, uint8(policy.Strict), 0, int64(5 * time.Second)}, // WarmUp in Strict
	} {
		f.Add(s.name, s.limit, s.window, s.algorithm, s.precision, s.mode, s.burst, s.warmUp)
	}
	f.Fuzz(func(t *testing.T, name string, limit, win int64, algorithm uint8, precision int, mode uint8, burst, warmUp int64) {
		r := policy.Rule{
			Name:      name,
			Limit:     limit,
			Window:    time.Duration(win),
			Algorithm: policy.Algorithm(algorithm),
			Precision: precision,
			Mode:      policy.Mode(mode),
			Burst:     burst,
			WarmUp:    time.Duration(warmUp),
		}
		err := r.Validate()
		if err != nil {
			if !errors.Is(err, policy.ErrInvalidRule) {
				t.Fatalf("%+v: error %q does not wrap ErrInvalidRule", r, err)
			}
			if msg := err.Error(); msg == "" || strings.ContainsAny(msg, "\n\r") {
				t.Fatalf("%+v: error message %q is not one line", r, msg)
			}
			return
		}
		checkAccepted(t, r)
	})
}

// dummyClient satisfies syncer.New, which does not use it before Start.
var dummyClient redis.UniversalClient = (*redis.Client)(nil)

func checkAccepted(t *testing.T, r policy.Rule) {
	t.Helper()
	if r.Limit < 1 || r.Limit > policy.MaxLimit || r.Window < policy.MinWindow || r.Window > policy.MaxWindow {
		t.Fatalf("%+v accepted out of range", r)
	}
	switch r.Algorithm {
	case policy.TokenBucket, policy.GCRA, policy.SlidingLog:
		checkAcceptedKeyed(t, r)
		checkLimiter(t, r)
		return
	}
	if r.Burst != 0 || r.WarmUp != 0 {
		t.Fatalf("%+v: a window rule accepted with Burst or WarmUp", r)
	}
	b := rulegeo.Buckets(r)
	switch {
	case r.Algorithm == policy.FixedWindow && b != 1,
		r.Algorithm != policy.FixedWindow && r.Precision == 0 && b != policy.DefaultPrecision,
		r.Algorithm != policy.FixedWindow && r.Precision != 0 && b != r.Precision,
		b < 1 || b > policy.MaxPrecision:
		t.Fatalf("%+v: Buckets() = %d", r, b)
	}
	var geo window.Sliding
	switch r.Algorithm {
	case policy.FixedWindow:
		geo = window.NewFixed(r.Window)
	case policy.WeightedWindow:
		geo = window.NewWeighted(r.Window, b)
	default:
		geo = window.NewSliding(r.Window, b)
	}
	sub := geo.Sub()
	switch {
	case geo.Buckets() != b, geo.Window() != r.Window, time.Duration(sub) != rulegeo.SubWindow(r),
		sub < int64(time.Microsecond), sub%int64(time.Microsecond) != 0:
		t.Fatalf("%+v: geometry %d × %dns, window %v, SubWindow %v", r, geo.Buckets(), sub, geo.Window(), rulegeo.SubWindow(r))
	}
	// The geometry's bucket arithmetic holds at times near the epoch and
	// at today's store clock.
	for _, now := range []int64{0, 1, sub - 1, sub, time.Now().UnixNano()} {
		k := geo.Index(now)
		if k*sub > now || (k+1)*sub <= now {
			t.Fatalf("%+v: Index(%d) = %d", r, now, k)
		}
		if ra := geo.ResetAfter(now); ra <= 0 || ra > r.Window+time.Duration(sub) {
			t.Fatalf("%+v: ResetAfter(%d) = %v", r, now, ra)
		}
	}

	keys := localcache.NewKeys(10)
	tab, err := localcache.New(localcache.Config{Geometry: geo, Limit: r.Limit, Eventual: true, Keys: keys})
	if err != nil {
		t.Fatalf("%+v: localcache rejects an accepted rule: %v", r, err)
	}
	_, err = syncer.New(syncer.Config{
		Client: dummyClient, Prefix: "p", InstanceID: "i", Interval: time.Second, Timeout: time.Second,
	}, syncport.RuleConfig{Name: r.Name, Keys: tab.SyncKeys(), Geometry: geo, Limit: r.Limit})
	if err != nil {
		t.Fatalf("%+v: the syncer rejects an accepted rule: %v", r, err)
	}

	checkLimiter(t, r)
}

// checkAcceptedKeyed checks an accepted TokenBucket, GCRA or SlidingLog
// rule: its math builds (the constructors panic on bad input) and its
// table accepts it.
func checkAcceptedKeyed(t *testing.T, r policy.Rule) {
	t.Helper()
	keys := localcache.NewKeys(10)
	if r.Algorithm == policy.SlidingLog {
		if r.Limit > policy.MaxLogLimit || r.Burst != 0 || r.WarmUp != 0 || r.Precision != 0 {
			t.Fatalf("%+v: accepted a log with Burst, WarmUp, Precision or too high a Limit", r)
		}
		if _, err := localcache.NewLogTable(r.Window, r.Limit, keys); err != nil {
			t.Fatalf("%+v: localcache rejects an accepted rule: %v", r, err)
		}
		return
	}
	if r.Precision != 0 || r.Interval() < policy.MinInterval || r.MaxCost() < 1 || r.MaxCost() > policy.MaxLimit {
		t.Fatalf("%+v: accepted with Precision, interval %v or MaxCost %d", r, r.Interval(), r.MaxCost())
	}
	g := window.NewGCRA(r.Window, r.Limit, r.Burst)
	if g.Interval() != int64(r.Interval()) || g.Burst() != r.MaxCost() {
		t.Fatalf("%+v: GCRA interval %d, burst %d", r, g.Interval(), g.Burst())
	}
	if r.WarmUp == 0 {
		if _, err := localcache.NewGCRATable(g, keys); err != nil {
			t.Fatalf("%+v: localcache rejects an accepted rule: %v", r, err)
		}
		return
	}
	w := window.NewWarmUp(r.Window, r.WarmUp, r.Limit, r.Burst)
	if _, err := localcache.NewWarmTable(w, keys); err != nil {
		t.Fatalf("%+v: localcache rejects an accepted rule: %v", r, err)
	}
}

// checkLimiter checks that a Limiter takes an accepted rule and admits cost
// 1 and MaxCost on fresh keys, and rejects MaxCost+1.
func checkLimiter(t *testing.T, r policy.Rule) {
	t.Helper()
	// A Limiter takes it. Without a store only Local (or default) rules
	// are allowed; the fuzzed Mode was validated above.
	lr := r
	lr.Mode = policy.Local
	l, err := sluice.New(sluice.Options{}, lr)
	if err != nil {
		t.Fatalf("%+v: New rejects an accepted rule: %v", lr, err)
	}
	defer l.Close()
	ctx := t.Context()
	if d, err := l.Allow(ctx, r.Name, "a"); err != nil || !d.Allowed {
		t.Fatalf("%+v: first check: %+v, %v", lr, d, err)
	}
	if d, err := l.AllowN(ctx, r.Name, "b", r.MaxCost()); err != nil || !d.Allowed {
		t.Fatalf("%+v: cost MaxCost on a fresh key: %+v, %v", lr, d, err)
	}
	if _, err := l.AllowN(ctx, r.Name, "c", r.MaxCost()+1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("%+v: cost MaxCost+1: %v", lr, err)
	}
	if r.Mode != policy.ModeDefault && r.Mode != policy.Local {
		if _, err := sluice.New(sluice.Options{}, r); !errors.Is(err, policy.ErrInvalidRule) {
			t.Fatalf("%+v: a shared rule without a store: %v", r, err)
		}
	}
	switch r.Algorithm {
	case policy.TokenBucket, policy.GCRA, policy.SlidingLog:
		checkKeyedModes(t, r)
	}
}

// checkKeyedModes checks the modes of an accepted TokenBucket, GCRA or
// SlidingLog rule: Eventual only for a bucket without a WarmUp; the default
// with a store (Eventual) is refused by New before the store is dialled
// for the others; Strict never with a WarmUp; and the syncer takes every
// shared rule (its store state and key names), an Eventual one at any
// error budget.
func checkKeyedModes(t *testing.T, r policy.Rule) {
	t.Helper()
	eventual := r.Algorithm != policy.SlidingLog && r.WarmUp == 0
	mode := r.Mode
	switch mode {
	case policy.Eventual:
		if !eventual {
			t.Fatalf("%+v: Eventual accepted for a %v", r, r.Algorithm)
		}
	case policy.ModeDefault:
		ev := r
		ev.Mode = policy.Eventual
		if !eventual || ev.Validate() != nil {
			if _, err := sluice.New(sluice.Options{Redis: neverDialled}, r); !errors.Is(err, policy.ErrInvalidRule) {
				t.Fatalf("%+v: the default mode (Eventual) with a store: %v", r, err)
			}
			return
		}
		mode = policy.Eventual
	case policy.Strict:
		if r.WarmUp != 0 {
			t.Fatalf("%+v: a WarmUp accepted in Strict", r)
		}
	default:
		return
	}
	s, err := syncer.New(syncer.Config{Client: dummyClient, Prefix: "p", InstanceID: "i", Interval: time.Second, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case r.Algorithm == policy.SlidingLog:
		_, err = s.Rules().AddLog(r.Name, r.Window, r.Limit)
	case mode == policy.Strict:
		_, err = s.Rules().AddGCRA(r.Name, int64(r.Interval()), r.MaxCost(), r.MaxCost())
	default:
		for _, budget := range []float64{0, 0.01, 1} {
			capacity, pool := window.SplitBucket(r.MaxCost(), budget)
			if capacity < 1 || capacity+pool != r.MaxCost()+int64(budget*float64(r.MaxCost())) {
				t.Fatalf("%+v: split %d + %d at ε = %v", r, capacity, pool, budget)
			}
			if _, err = s.Rules().AddGCRA(r.Name, int64(r.Interval()), r.MaxCost(), capacity); err != nil && budget < 1 {
				break
			}
			err = nil // at ε = 1 a store capacity past MaxStrictTolerance is refused by New
		}
	}
	if err != nil {
		t.Fatalf("%+v: the syncer rejects an accepted %v rule: %v", r, mode, err)
	}
}

// neverDialled is a client New never reaches for a rule it refuses.
var neverDialled = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
