package policy_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/syncer"
	"github.com/sluicehq/sluice/window"
)

// FuzzRuleValidate runs Validate on arbitrary field values. It must never
// panic. A rejection wraps ErrInvalidRule in a one-line message. An accepted
// rule must work everywhere a rule goes: it builds a window geometry whose
// sub-windows are whole microseconds and add up to the Window, with the
// documented bucket count; the local cache and the syncer (which keys Redis
// by the sub-window in µs) accept it; a Limiter takes it and admits a check
// of cost 1 and of cost Limit on a fresh key, and rejects cost Limit+1.
func FuzzRuleValidate(f *testing.F) {
	type seed struct {
		name      string
		limit     int64
		window    int64
		algorithm uint8
		precision int
		mode      uint8
	}
	for _, s := range []seed{
		{"api", 100, int64(time.Second), 0, 0, 0},
		{"login", 5, int64(15 * time.Minute), 0, 60, uint8(policy.Strict)},
		{"fixed", 1, int64(time.Millisecond), uint8(policy.FixedWindow), 0, uint8(policy.Local)},
		{"weighted", 100, int64(time.Minute), uint8(policy.WeightedWindow), 6, uint8(policy.Eventual)},
		{"max", policy.MaxLimit, int64(policy.MaxWindow), 0, policy.MaxPrecision, uint8(policy.Eventual)},
		{"x", policy.MaxLimit + 1, int64(time.Second), 0, 0, 0},
		{"x", 0, int64(time.Second), 0, 0, 0},
		{"x", -1, -1, 0, -1, 0},
		{"x", 10, int64(time.Second) + 1, 0, 0, 0},                        // not whole µs
		{"x", 10, int64(time.Second), 0, 7, 0},                            // 1s/7 not whole µs
		{"x", 10, int64(time.Microsecond) * 64, 0, 64, 0},                 // 1µs sub-windows, below MinWindow
		{"x", 10, int64(time.Second) + int64(time.Microsecond), 1, 99, 0}, // fixed ignores Precision
		{"x", 10, int64(policy.MaxWindow) + 1, 0, 0, 0},
		{"x", 10, math.MaxInt64, 0, 0, 0},
		{"x", 10, math.MinInt64, 2, 0, 4},
		{"a:b", 10, int64(time.Second), 0, 0, 0},
		{"", 10, int64(time.Second), 0, 0, 0},
		{"é", 10, int64(time.Second), 0, 0, 0},
	} {
		f.Add(s.name, s.limit, s.window, s.algorithm, s.precision, s.mode)
	}
	f.Fuzz(func(t *testing.T, name string, limit, win int64, algorithm uint8, precision int, mode uint8) {
		r := policy.Rule{
			Name:      name,
			Limit:     limit,
			Window:    time.Duration(win),
			Algorithm: policy.Algorithm(algorithm),
			Precision: precision,
			Mode:      policy.Mode(mode),
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
	b := r.Buckets()
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
	case geo.Buckets() != b, geo.Window() != r.Window, time.Duration(sub) != r.SubWindow(),
		sub < int64(time.Microsecond), sub%int64(time.Microsecond) != 0:
		t.Fatalf("%+v: geometry %d × %dns, window %v, SubWindow %v", r, geo.Buckets(), sub, geo.Window(), r.SubWindow())
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
	}, syncer.RuleConfig{Name: r.Name, Keys: tab, Geometry: geo, Limit: r.Limit})
	if err != nil {
		t.Fatalf("%+v: the syncer rejects an accepted rule: %v", r, err)
	}

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
	if d, err := l.AllowN(ctx, r.Name, "b", r.Limit); err != nil || !d.Allowed {
		t.Fatalf("%+v: cost Limit on a fresh key: %+v, %v", lr, d, err)
	}
	if _, err := l.AllowN(ctx, r.Name, "c", r.Limit+1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("%+v: cost Limit+1: %v", lr, err)
	}
	if r.Mode != policy.ModeDefault && r.Mode != policy.Local {
		if _, err := sluice.New(sluice.Options{}, r); !errors.Is(err, policy.ErrInvalidRule) {
			t.Fatalf("%+v: a shared rule without a store: %v", r, err)
		}
	}
}
