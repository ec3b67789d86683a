package policy_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// valid is a rule that passes Validate; cases change one field of it.
func valid() policy.Rule {
	return policy.Rule{Name: "api", Limit: 100, Window: time.Second}
}

func with(f func(r *policy.Rule)) policy.Rule {
	r := valid()
	f(&r)
	return r
}

func TestValidateErrors(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("n", policy.MaxNameLength+1)
	maxLimit := fmt.Sprint(int64(policy.MaxLimit))
	overLimit := fmt.Sprint(int64(policy.MaxLimit) + 1)
	tests := []struct {
		name string
		rule policy.Rule
		// want are substrings of the message: what is wrong (naming the
		// rule) and how to fix it.
		want []string
	}{
		{"empty name", with(func(r *policy.Rule) { r.Name = "" }),
			[]string{"invalid rule: empty Name", "every rule needs a unique name"}},
		{"name too long", with(func(r *policy.Rule) { r.Name = long }),
			[]string{`invalid rule "nnnnnnnnnnnnnnnnnnnn"...`, "Name is 65 bytes long", "the maximum is 64"}},
		{"name far too long", with(func(r *policy.Rule) { r.Name = strings.Repeat("x", 1000) }),
			[]string{`invalid rule "xxxxxxxxxxxxxxxxxxxx"...`, "Name is 1000 bytes long", "the maximum is 64"}},
		{"name with colon", with(func(r *policy.Rule) { r.Name = "api:v1" }),
			[]string{`invalid rule "api:v1"`, `Name has ':' at byte 3`, "use only letters, digits, '_', '.' and '-'"}},
		{"name with open brace", with(func(r *policy.Rule) { r.Name = "{api" }),
			[]string{`invalid rule "{api"`, `Name has '{' at byte 0`, "use only letters"}},
		{"name with close brace", with(func(r *policy.Rule) { r.Name = "api}" }),
			[]string{`invalid rule "api}"`, `Name has '}' at byte 3`, "use only letters"}},
		{"name with space", with(func(r *policy.Rule) { r.Name = "my api" }),
			[]string{`invalid rule "my api"`, `Name has ' ' at byte 2`, "use only letters"}},
		{"name with newline", with(func(r *policy.Rule) { r.Name = "api\n" }),
			[]string{`invalid rule "api\n"`, `Name has '\n' at byte 3`, "use only letters"}},
		{"name with tab", with(func(r *policy.Rule) { r.Name = "a\tb" }),
			[]string{`invalid rule "a\tb"`, `Name has '\t' at byte 1`}},
		{"name with NUL", with(func(r *policy.Rule) { r.Name = "a\x00" }),
			[]string{`invalid rule "a\x00"`, `Name has '\x00' at byte 1`}},
		{"name with slash", with(func(r *policy.Rule) { r.Name = "a/b" }),
			[]string{`invalid rule "a/b"`, `Name has '/' at byte 1`}},
		{"name with star", with(func(r *policy.Rule) { r.Name = "a*" }),
			[]string{`Name has '*' at byte 1`}},
		// Non-ASCII: the message names the character, not its first byte
		// read as Latin-1 (before the fix: 'Ã' for "é").
		{"name non-ASCII", with(func(r *policy.Rule) { r.Name = "café" }),
			[]string{`invalid rule "café"`, `Name has 'é' at byte 3`, "use only letters"}},
		{"name non-ASCII letter first", with(func(r *policy.Rule) { r.Name = "Ωmega" }),
			[]string{`Name has 'Ω' at byte 0`}},
		{"name invalid UTF-8", with(func(r *policy.Rule) { r.Name = "a\xffb" }),
			[]string{`invalid rule "a\xffb"`, `Name has byte 0xff at byte 1`}},
		{"limit 0", with(func(r *policy.Rule) { r.Limit = 0 }),
			[]string{`invalid rule "api"`, "Limit 0 is out of range", "it must be between 1 and " + maxLimit}},
		{"limit -1", with(func(r *policy.Rule) { r.Limit = -1 }),
			[]string{`invalid rule "api"`, "Limit -1 is out of range", "it must be between 1 and " + maxLimit}},
		{"limit MaxLimit+1", with(func(r *policy.Rule) { r.Limit = policy.MaxLimit + 1 }),
			[]string{`invalid rule "api"`, "Limit " + overLimit + " is out of range", "it must be between 1 and " + maxLimit}},
		{"window 0", with(func(r *policy.Rule) { r.Window = 0 }),
			[]string{`invalid rule "api"`, "Window 0s is out of range", "it must be between 1ms and 8784h0m0s"}},
		{"window negative", with(func(r *policy.Rule) { r.Window = -time.Second }),
			[]string{"Window -1s is out of range", "it must be between 1ms and 8784h0m0s"}},
		{"window 999µs", with(func(r *policy.Rule) { r.Window = 999 * time.Microsecond }),
			[]string{`invalid rule "api"`, "Window 999µs is out of range", "it must be between 1ms and 8784h0m0s"}},
		{"window > MaxWindow", with(func(r *policy.Rule) { r.Window = policy.MaxWindow + time.Microsecond }),
			[]string{`invalid rule "api"`, "Window 8784h0m0.000001s is out of range", "it must be between 1ms and 8784h0m0s"}},
		{"window > MaxWindow fixed", with(func(r *policy.Rule) { r.Window = policy.MaxWindow + 1; r.Algorithm = policy.FixedWindow }),
			[]string{"is out of range"}},
		{"precision -1", with(func(r *policy.Rule) { r.Precision = -1 }),
			[]string{`invalid rule "api"`, "Precision -1 is out of range", "it must be between 1 and 64 (0 means 10)"}},
		{"precision 65", with(func(r *policy.Rule) { r.Precision = 65 }),
			[]string{`invalid rule "api"`, "Precision 65 is out of range", "it must be between 1 and 64 (0 means 10)"}},
		{"1s with precision 7", with(func(r *policy.Rule) { r.Precision = 7 }),
			[]string{`invalid rule "api"`, "Window 1s does not split into 7 sub-windows of whole microseconds", "pick a Precision that divides it"}},
		{"1ms with precision 64", with(func(r *policy.Rule) { r.Window = time.Millisecond; r.Precision = 64 }),
			[]string{"Window 1ms does not split into 64 sub-windows of whole microseconds", "pick a Precision"}},
		// Precision 0 means 10: 1.001ms / 10 = 100.1µs.
		{"default precision does not split", with(func(r *policy.Rule) { r.Window = 1001 * time.Microsecond }),
			[]string{"Window 1.001ms does not split into 10 sub-windows of whole microseconds", "pick a Precision"}},
		{"sliding window not whole µs", with(func(r *policy.Rule) { r.Window = time.Second + 1; r.Precision = 1 }),
			[]string{"Window 1.000000001s does not split into 1 sub-windows of whole microseconds"}},
		// Before the fix this message said what was wrong but not how to fix it.
		{"fixed window not whole µs", with(func(r *policy.Rule) { r.Window = time.Millisecond + 1; r.Algorithm = policy.FixedWindow }),
			[]string{`invalid rule "api"`, "Window 1.000001ms is not a whole number of microseconds", "round it, for example to 1ms"}},
		{"unknown algorithm", with(func(r *policy.Rule) { r.Algorithm = 99 }),
			[]string{`invalid rule "api"`, "unknown Algorithm 99", "use policy.SlidingWindow, WeightedWindow, FixedWindow, TokenBucket, GCRA or SlidingLog"}},
		{"unknown algorithm 255", with(func(r *policy.Rule) { r.Algorithm = 255 }),
			[]string{"unknown Algorithm 255", "use policy.SlidingWindow, WeightedWindow, FixedWindow, TokenBucket, GCRA or SlidingLog"}},
		// Fields that belong to other algorithms.
		{"burst on sliding", with(func(r *policy.Rule) { r.Burst = 10 }),
			[]string{`invalid rule "api"`, "Burst 10 is set on a sliding rule", "only TokenBucket and GCRA have a capacity", "remove Burst"}},
		{"burst on fixed", with(func(r *policy.Rule) { r.Algorithm = policy.FixedWindow; r.Burst = -1 }),
			[]string{"Burst -1 is set on a fixed rule"}},
		{"burst on log", with(func(r *policy.Rule) { r.Algorithm = policy.SlidingLog; r.Burst = 5 }),
			[]string{"Burst 5 is set on a sliding-log rule"}},
		{"warm-up on sliding", with(func(r *policy.Rule) { r.WarmUp = time.Second }),
			[]string{"WarmUp 1s is set on a sliding rule", "only TokenBucket and GCRA warm up", "remove WarmUp"}},
		{"warm-up on log", with(func(r *policy.Rule) { r.Algorithm = policy.SlidingLog; r.WarmUp = -time.Second }),
			[]string{"WarmUp -1s is set on a sliding-log rule"}},
		{"precision on gcra", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.Precision = 10 }),
			[]string{"Precision 10 is set on a gcra rule", "only SlidingWindow and WeightedWindow have sub-windows", "remove Precision"}},
		{"precision on token bucket", with(func(r *policy.Rule) { r.Algorithm = policy.TokenBucket; r.Precision = -1 }),
			[]string{"Precision -1 is set on a token-bucket rule"}},
		{"precision on log", with(func(r *policy.Rule) { r.Algorithm = policy.SlidingLog; r.Precision = 1 }),
			[]string{"Precision 1 is set on a sliding-log rule"}},
		{"log limit too large", with(func(r *policy.Rule) { r.Algorithm = policy.SlidingLog; r.Limit = policy.MaxLogLimit + 1 }),
			[]string{"Limit 1025 is too large for a SlidingLog", "the most is 1024", "use SlidingWindow or GCRA"}},
		{"gcra interval under 1µs", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.Limit = 2_000_001 }),
			[]string{"Window/Limit is 500ns", "must be at least 1µs", "count in coarser units"}},
		{"burst negative", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.Burst = -1 }),
			[]string{"Burst -1 is out of range", "between 1 and 4294967295 (0 means Limit)"}},
		{"burst above MaxLimit", with(func(r *policy.Rule) { r.Algorithm = policy.TokenBucket; r.Burst = policy.MaxLimit + 1 }),
			[]string{"Burst 4294967296 is out of range"}},
		{"burst refills too slowly", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.Limit = 1; r.Window = time.Hour; r.Burst = 10_000 }),
			[]string{"Burst 10000 takes 10000 intervals of 1h0m0s to refill, longer than 8784h0m0s", "lower Burst"}},
		{"warm-up negative", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.WarmUp = -1 }),
			[]string{"WarmUp -1ns is negative", "use 0 for no warm-up"}},
		{"warm-up at a high rate", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.Limit = 2000; r.WarmUp = time.Second }),
			[]string{"Window/Limit is 500µs", "with a WarmUp the interval must be at least 1ms"}},
		{"warm-up under one interval", with(func(r *policy.Rule) { r.Algorithm = policy.TokenBucket; r.WarmUp = time.Millisecond }),
			[]string{"WarmUp 1ms is shorter than one interval (10ms)"}},
		{"warm-up too long", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.WarmUp = time.Hour }),
			[]string{"WarmUp 1h0m0s spans 360000 intervals of 10ms; the most is 65536"}},
		{"warm-up burst too slow", with(func(r *policy.Rule) {
			r.Algorithm = policy.GCRA
			r.Limit, r.Window, r.Burst, r.WarmUp = 1, time.Hour, 25, time.Hour
		}), []string{"Burst 25 takes 25h0m0s to refill; with a WarmUp the most is 24h0m0s"}},
		{"weighted precision 65", with(func(r *policy.Rule) { r.Algorithm = policy.WeightedWindow; r.Precision = 65 }),
			[]string{`invalid rule "api"`, "Precision 65 is out of range"}},
		{"burst on weighted", with(func(r *policy.Rule) { r.Algorithm = policy.WeightedWindow; r.Burst = 3 }),
			[]string{"Burst 3 is set on a weighted rule"}},
		{"eventual warm-up", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.Mode = policy.Eventual; r.WarmUp = 10 * time.Second }),
			[]string{"WarmUp 10s with Mode Eventual", "decided in this process only", "use Mode policy.Local, or remove WarmUp"}},
		{"eventual sliding log", with(func(r *policy.Rule) { r.Algorithm = policy.SlidingLog; r.Mode = policy.Eventual }),
			[]string{"Mode Eventual is refused for a SlidingLog", "exact by definition", "use Mode policy.Strict", "or policy.Local"}},
		{"strict warm-up", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.Mode = policy.Strict; r.WarmUp = 10 * time.Second }),
			[]string{"WarmUp 10s with Mode Strict", "use Mode policy.Local, or remove WarmUp"}},
		{"strict tolerance", with(func(r *policy.Rule) {
			r.Algorithm, r.Mode = policy.TokenBucket, policy.Strict
			r.Limit, r.Window, r.Burst = 1, 24*time.Hour, 60
		}), []string{"Burst 60 takes 1440h0m0s to refill; in a shared mode (Strict, Eventual) the most is"}},
		{"unknown mode", with(func(r *policy.Rule) { r.Mode = 4 }),
			[]string{`invalid rule "api"`, "unknown Mode 4", "use policy.Eventual, policy.Local or policy.Strict"}},
		// Several problems: the name is reported first, then the fields in
		// declaration order.
		{"first problem reported", policy.Rule{Name: "a b", Limit: 0, Window: 0, Precision: -1}, []string{`Name has ' '`}},
		{"limit before window", policy.Rule{Name: "ab", Limit: 0, Window: 0}, []string{"Limit 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.rule.Validate()
			require.Error(t, err)
			assert.ErrorIs(t, err, policy.ErrInvalidRule)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
			// The message is one line: rule names are quoted.
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestValidateValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rule policy.Rule
	}{
		{"defaults", valid()},
		{"every name byte", with(func(r *policy.Rule) { r.Name = "azAZ09_.-" })},
		{"one byte name", with(func(r *policy.Rule) { r.Name = "x" })},
		{"dots and dashes only", with(func(r *policy.Rule) { r.Name = ".-_" })},
		{"64 byte name", with(func(r *policy.Rule) { r.Name = strings.Repeat("n", policy.MaxNameLength) })},
		{"limit 1", with(func(r *policy.Rule) { r.Limit = 1 })},
		{"limit MaxLimit", with(func(r *policy.Rule) { r.Limit = policy.MaxLimit })},
		{"MinWindow", with(func(r *policy.Rule) { r.Window = policy.MinWindow })},
		{"MaxWindow", with(func(r *policy.Rule) { r.Window = policy.MaxWindow })},
		{"precision 1", with(func(r *policy.Rule) { r.Precision = 1 })},
		{"precision 64", with(func(r *policy.Rule) { r.Precision = 64 })}, // 1s/64 = 15625µs
		{"precision 7 on 7s", with(func(r *policy.Rule) { r.Precision = 7; r.Window = 7 * time.Second })},
		{"precision 1 on 1.001ms", with(func(r *policy.Rule) { r.Precision = 1; r.Window = 1001 * time.Microsecond })},
		{"fixed ignores precision 65", with(func(r *policy.Rule) { r.Algorithm = policy.FixedWindow; r.Precision = 65 })},
		{"fixed ignores precision -1", with(func(r *policy.Rule) { r.Algorithm = policy.FixedWindow; r.Precision = -1 })},
		{"fixed ignores non-dividing precision", with(func(r *policy.Rule) { r.Algorithm = policy.FixedWindow; r.Precision = 7 })},
		{"fixed odd µs window", with(func(r *policy.Rule) { r.Algorithm = policy.FixedWindow; r.Window = 1001 * time.Microsecond })},
		{"mode eventual", with(func(r *policy.Rule) { r.Mode = policy.Eventual })},
		{"mode local", with(func(r *policy.Rule) { r.Mode = policy.Local })},
		{"mode strict", with(func(r *policy.Rule) { r.Mode = policy.Strict })},
		{"token bucket", with(func(r *policy.Rule) { r.Algorithm = policy.TokenBucket })},
		{"gcra burst 1", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.Burst = 1 })},
		{"gcra burst MaxLimit", with(func(r *policy.Rule) {
			r.Algorithm = policy.GCRA
			r.Limit = 1_000_000
			r.Window = time.Hour
			r.Burst = policy.MaxLimit
		})},
		{"gcra interval 1µs", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.Limit = 1_000_000 })},
		{"gcra rounded interval", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.Limit = 3 })},
		{"gcra odd ns window", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.Window = time.Second + time.Microsecond })},
		{"gcra warm-up", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.WarmUp = 10 * time.Second })},
		{"token bucket warm-up at the bounds", with(func(r *policy.Rule) {
			r.Algorithm = policy.TokenBucket
			r.Limit, r.WarmUp, r.Burst = 1000, 65536*time.Millisecond, 1000
		})},
		{"sliding log", with(func(r *policy.Rule) { r.Algorithm = policy.SlidingLog })},
		{"strict gcra", with(func(r *policy.Rule) { r.Algorithm = policy.GCRA; r.Mode = policy.Strict; r.Burst = 3 })},
		{"strict token bucket at the tolerance", with(func(r *policy.Rule) {
			r.Algorithm, r.Mode = policy.TokenBucket, policy.Strict
			r.Limit, r.Window, r.Burst = 1, 24*time.Hour, 52
		})},
		{"strict sliding log", with(func(r *policy.Rule) { r.Algorithm = policy.SlidingLog; r.Mode = policy.Strict })},
		{"sliding log MaxLogLimit", with(func(r *policy.Rule) { r.Algorithm = policy.SlidingLog; r.Limit = policy.MaxLogLimit })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.NoError(t, tt.rule.Validate())
		})
	}
}

// TestValidRulesMakeGeometry checks that every rule Validate accepts can be
// turned into a window geometry (which panics on bad input), with
// SubWindow·Buckets = Window, and sub-windows of whole microseconds.
func TestValidRulesMakeGeometry(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(21, 22))
	accepted := 0
	for range 20000 {
		rule := policy.Rule{
			Name:      "r",
			Limit:     1 + r.Int64N(1000),
			Algorithm: policy.Algorithm(r.IntN(2)),
			Precision: r.IntN(66) - 1,
		}
		switch r.IntN(3) {
		case 0:
			rule.Window = time.Duration(1+r.Int64N(10000)) * time.Millisecond
		case 1:
			rule.Window = time.Duration(1000+r.Int64N(1_000_000)) * time.Microsecond
		default:
			rule.Window = time.Duration(r.Int64N(int64(policy.MaxWindow) + 2*int64(time.Millisecond)))
		}
		if rule.Validate() != nil {
			continue
		}
		accepted++
		b := rulegeo.Buckets(rule)
		require.GreaterOrEqual(t, b, 1)
		require.LessOrEqual(t, b, policy.MaxPrecision)
		require.Equal(t, rule.Window, rulegeo.SubWindow(rule)*time.Duration(b), "%+v", rule)
		require.Zero(t, rulegeo.SubWindow(rule)%time.Microsecond, "%+v", rule)
		require.NotPanics(t, func() {
			var geo window.Sliding
			if rule.Algorithm == policy.FixedWindow {
				geo = window.NewFixed(rule.Window)
			} else {
				geo = window.NewSliding(rule.Window, b)
			}
			require.Equal(t, int64(rulegeo.SubWindow(rule)), geo.Sub())
			require.Equal(t, b, geo.Buckets())
		}, "%+v", rule)
	}
	assert.Greater(t, accepted, 2000)
}

func TestStrings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		v    fmt.Stringer
		want string
	}{
		{policy.SlidingWindow, "sliding"},
		{policy.FixedWindow, "fixed"},
		{policy.WeightedWindow, "weighted"},
		{policy.TokenBucket, "token-bucket"},
		{policy.GCRA, "gcra"},
		{policy.SlidingLog, "sliding-log"},
		{policy.Algorithm(99), "Algorithm(99)"},
		{policy.Algorithm(255), "Algorithm(255)"},
		{policy.ModeDefault, "default"},
		{policy.Eventual, "eventual"},
		{policy.Local, "local"},
		{policy.Strict, "strict"},
		{policy.Mode(4), "Mode(4)"},
		{policy.Mode(255), "Mode(255)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, tt.v.String())
			assert.Equal(t, tt.want, fmt.Sprint(tt.v))
		})
	}
	// The zero values are the documented defaults.
	var r policy.Rule
	assert.Equal(t, policy.SlidingWindow, r.Algorithm)
	assert.Equal(t, policy.ModeDefault, r.Mode)
}

// TestIntervalMaxCost: Interval is Window/Limit rounded to the nearest ns;
// MaxCost is Burst (default Limit) for the buckets, Limit otherwise.
func TestIntervalMaxCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		rule     policy.Rule
		interval time.Duration
		maxCost  int64
	}{
		{"exact", policy.Rule{Limit: 100, Window: time.Second, Algorithm: policy.GCRA}, 10 * time.Millisecond, 100},
		{"rounded down", policy.Rule{Limit: 3, Window: time.Second, Algorithm: policy.GCRA, Burst: 7}, 333333333, 7},
		{"rounded up", policy.Rule{Limit: 3, Window: 2 * time.Second, Algorithm: policy.TokenBucket, Burst: 1}, 666666667, 1},
		{"burst ignored by windows", policy.Rule{Limit: 10, Window: time.Second, Burst: 3}, 100 * time.Millisecond, 10},
		{"log", policy.Rule{Limit: 10, Window: time.Second, Algorithm: policy.SlidingLog}, 100 * time.Millisecond, 10},
		{"no limit", policy.Rule{Window: time.Second}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.interval, tt.rule.Interval())
			assert.Equal(t, tt.maxCost, tt.rule.MaxCost())
		})
	}
}

func TestLimitsConstants(t *testing.T) {
	t.Parallel()
	// Limits must fit the 40-bit counters of package localcache.
	assert.Less(t, int64(policy.MaxLimit), int64(1)<<40)
	assert.Positive(t, int64(policy.MaxLimit))
	assert.Equal(t, time.Millisecond, policy.MinWindow)
	assert.Equal(t, 366*24*time.Hour, policy.MaxWindow)
	assert.Equal(t, 64, policy.MaxPrecision)
	assert.Equal(t, 64, policy.MaxNameLength)
	// MinWindow does not split into MaxPrecision sub-windows of whole
	// microseconds: Validate must check the division, not just the ranges.
	assert.NotZero(t, policy.MinWindow%(policy.MaxPrecision*time.Microsecond))
}

// isNameByte is the documented name alphabet, written independently.
func isNameByte(c byte) bool {
	return strings.IndexByte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-", c) >= 0
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{
		"", "api", "a", "login.attempts_v2-eu", strings.Repeat("x", 64), strings.Repeat("x", 65),
		"a:b", "{tag}", "a b", "a\nb", "café", "\xff", "\x00", "Ωmega",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := policy.ValidateName(s) // must not panic
		ok := len(s) >= 1 && len(s) <= policy.MaxNameLength
		for i := 0; ok && i < len(s); i++ {
			ok = isNameByte(s[i])
		}
		if ok {
			require.NoError(t, err, "%q", s)
			// An accepted name is a valid rule name too.
			require.NoError(t, policy.Rule{Name: s, Limit: 1, Window: time.Second}.Validate())
			return
		}
		require.Error(t, err, "%q accepted", s)
		require.ErrorIs(t, err, policy.ErrInvalidRule)
		require.NotContains(t, err.Error(), "\n", "message is one line")
		require.ErrorIs(t, policy.Rule{Name: s, Limit: 1, Window: time.Second}.Validate(), policy.ErrInvalidRule)
	})
}
