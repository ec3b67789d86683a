package policy_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/policy"
)

// The envoy fixtures under testdata/envoy are written for this project:
// together they use every construct of envoy ratelimit's own example and
// test configurations (nested descriptors, value-less defaults next to
// specific values, values without a limit, units from second to day and
// their upper-case spelling, trailing-'*' wildcards and a '*' that is not
// trailing, requests_per_unit 0, unlimited, shadow_mode, name, replaces,
// detailed_metric, unit_multiplier, flow mappings, a leading "---").

func load(t *testing.T, path string) policy.Config {
	t.Helper()
	c, err := policy.LoadFile(path)
	require.NoError(t, err)
	return c
}

// TestMatchEnvoy is a table of envoy ratelimit's documented answers: most
// specific match first (key and value, then a trailing-'*' wildcard, then
// the key's default), the limit only of the descriptor the last entry
// matched, no limit for descriptors without one or with unlimited.
func TestMatchEnvoy(t *testing.T) {
	t.Parallel()
	type want struct {
		rule, key string
		ok        bool
	}
	e := func(kv ...string) []policy.Entry {
		var out []policy.Entry
		for i := 0; i < len(kv); i += 2 {
			out = append(out, policy.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	none := want{}
	tests := []struct {
		file    string
		name    string
		entries []policy.Entry
		want    want
	}{
		{"nested", "default at the 2nd level, per user", e("tenant", "acme", "user", "bob"), want{"shop.tenant_acme.user", "bob", true}},
		{"nested", "specific value beats the default", e("tenant", "acme", "user", "alice"), want{"shop.tenant_acme.user_alice", "", true}},
		{"nested", "a level without a limit: none", e("tenant", "acme"), none},
		{"nested", "unknown top-level value: none", e("tenant", "other", "user", "bob"), none},
		{"nested", "more entries than the tree is deep: none", e("tenant", "acme", "user", "bob", "x", "y"), none},
		{"nested", "top-level default, per path", e("path", "/cart"), want{"shop.path", "/cart", true}},
		{"nested", "top-level specific", e("path", "/checkout"), want{"shop.path__checkout-24a46df938fe23c8", "", true}},
		{"nested", "allow-listed value: no limit", e("path", "/health"), none},
		{"nested", "hour unit", e("report", "q3"), want{"shop.report", "q3", true}},
		{"nested", "limit at the first level", e("region", "eu"), want{"shop.region_eu", "", true}},
		{"nested", "limit at the second level", e("region", "eu", "zone", "eu-west"), want{"shop.region_eu.zone_eu-west", "", true}},
		{"nested", "second level unknown: none", e("region", "eu", "zone", "eu-north"), none},
		{"nested", "unknown key: none", e("nothing", "x"), none},
		{"nested", "no entries: none", nil, none},
		{"wildcard", "wildcard prefix, per value", e("client", "bot-crawler"), want{"wild.client_bot-_-92757328c8403ea3", "bot-crawler", true}},
		{"wildcard", "wildcard matches the bare prefix", e("client", "bot-"), want{"wild.client_bot-_-92757328c8403ea3", "bot-", true}},
		{"wildcard", "exact beats wildcard", e("client", "bot-good"), want{"wild.client_bot-good", "", true}},
		{"wildcard", "no prefix: the default", e("client", "human"), want{"wild.client", "human", true}},
		{"wildcard", "inner '*' is literal", e("plain", "x*y"), want{"wild.plain_x_y-2330e8cbaf72ed51", "", true}},
		{"wildcard", "inner '*' is not a pattern", e("plain", "xzy"), none},
		{"features", "top-level default", e("api", "k1"), want{"edge.api", "k1", true}},
		{"features", "requests_per_unit 0 is a Deny rule", e("api", "k1", "method", "DELETE"), want{"edge.api.method_DELETE", "k1", true}},
		{"features", "shadow-mode limit", e("api", "k1", "method", "GET"), want{"edge.api.method_GET", "k1", true}},
		{"features", "unlimited: none", e("api", "k1", "method", "OPTIONS"), none},
		{"features", "a method without a descriptor: none", e("api", "k1", "method", "PUT"), none},
		{"features", "two variable entries, joined and escaped", e("api", "a/b", "batch", `c\d`), want{"edge.api.batch", `a\/b/c\\d`, true}},
		{"features", "unlimited at the top", e("internal", "x"), none},
	}
	for _, tt := range tests {
		t.Run(tt.file+"/"+tt.name, func(t *testing.T) {
			t.Parallel()
			c := load(t, filepath.Join("testdata", "envoy", tt.file+".yaml"))
			rule, key, ok := c.Match(tt.entries...)
			assert.Equal(t, tt.want, want{rule, key, ok})
			if ok {
				var names []string
				for _, r := range c.Rules {
					names = append(names, r.Name)
				}
				assert.Contains(t, names, rule, "Match names a rule of the config")
			}
		})
	}
}

func TestEnvoyRules(t *testing.T) {
	t.Parallel()
	c := load(t, "testdata/envoy/features.yaml")
	assert.Equal(t, policy.FormatEnvoy, c.Format)
	assert.Equal(t, "edge", c.Domain)
	byName := map[string]policy.Rule{}
	for _, r := range c.Rules {
		byName[r.Name] = r
		assert.Equal(t, policy.FixedWindow, r.Algorithm, "envoy counts in aligned windows")
	}
	assert.Equal(t, policy.Rule{Name: "edge.api", Limit: 100, Window: time.Minute, Algorithm: policy.FixedWindow}, byName["edge.api"])
	assert.True(t, byName["edge.api.method_DELETE"].Deny)
	assert.True(t, byName["edge.api.method_GET"].Shadow, "shadow_mode")
	assert.Equal(t, 30*time.Second, byName["edge.api.batch"].Window, "unit_multiplier")
	api := c.Descriptors[0]
	assert.True(t, api.DetailedMetric)
	assert.Equal(t, "api-default", api.RateLimit.Name)
	get := api.Descriptors[1]
	assert.True(t, get.ShadowMode)
	assert.Equal(t, []string{"api-default"}, get.RateLimit.Replaces)
	assert.True(t, api.Descriptors[2].RateLimit.Unlimited)
	assert.Empty(t, api.Descriptors[2].Rule)
}

// TestRoundTrip: Encode then Load gives back every field of every rule.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	c := load(t, "testdata/sluice/rules.yaml")
	require.Len(t, c.Rules, 8)
	var buf bytes.Buffer
	require.NoError(t, c.Encode(&buf))
	back, err := policy.Load(&buf)
	require.NoError(t, err, buf.String())
	assert.Equal(t, c.Rules, back.Rules)

	// Random valid rules: every field, every algorithm and mode.
	rng := rand.New(rand.NewPCG(1, 2))
	var rules []policy.Rule
	for i := 0; len(rules) < 300; i++ {
		r := policy.Rule{
			Name:      "r" + string(rune('a'+i%26)) + "-" + time.Duration(i).String(),
			Limit:     1 + rng.Int64N(1000),
			Window:    time.Duration(1+rng.IntN(3600)) * time.Second,
			Algorithm: policy.Algorithm(rng.IntN(6)),
			Mode:      policy.Mode(rng.IntN(4)),
		}
		switch r.Algorithm {
		case policy.SlidingWindow, policy.WeightedWindow:
			r.Precision = []int{0, 1, 2, 4, 5}[rng.IntN(5)]
		case policy.TokenBucket, policy.GCRA:
			r.Burst = rng.Int64N(2000)
			if rng.IntN(2) == 0 {
				r.WarmUp = time.Duration(1+rng.IntN(10)) * r.Window
			}
		}
		if rng.IntN(3) == 0 {
			r.Shadow = true
		}
		if rng.IntN(3) == 0 {
			r.Soft = float64(rng.IntN(100)) / 64
		}
		switch rng.IntN(5) {
		case 0:
			r.Overrides = []policy.Override{{Tier: "pro", Keys: []string{"a", "b: c", "#x"}, Limit: r.Limit * 2}, {Tier: "free", Keys: []string{"'q'"}, Unlimited: true}}
		case 1:
			r = policy.Rule{Name: r.Name, Window: r.Window, Deny: true}
		}
		if r.Validate() == nil {
			rules = append(rules, r)
		}
	}
	buf.Reset()
	require.NoError(t, policy.Config{Rules: rules}.Encode(&buf))
	back, err = policy.Load(&buf)
	require.NoError(t, err)
	assert.Equal(t, rules, back.Rules)
}

func TestMatchSluice(t *testing.T) {
	t.Parallel()
	c := load(t, "testdata/sluice/rules.yaml")
	rule, key, ok := c.Match(policy.Entry{Key: "api", Value: "acme"})
	assert.Equal(t, []any{"api", "acme", true}, []any{rule, key, ok})
	_, _, ok = c.Match(policy.Entry{Key: "nope", Value: "acme"})
	assert.False(t, ok)
	_, _, ok = c.Match(policy.Entry{Key: "api", Value: "a"}, policy.Entry{Key: "login", Value: "b"})
	assert.False(t, ok)
}

// TestLoadCalendar: a rule with a period is a calendar quota, a fixed
// window in its time zone, and Encode writes it back as Load reads it; an
// envoy file's day, week and month stay windows of fixed length.
func TestLoadCalendar(t *testing.T) {
	t.Parallel()
	c, err := policy.Load(strings.NewReader("rules:\n  - {name: daily, limit: 1000, period: day, time_zone: America/New_York}\n  - {name: monthly, limit: 5, period: Month, algorithm: fixed, mode: strict}\n"))
	require.NoError(t, err)
	require.Len(t, c.Rules, 2)
	assert.Equal(t, policy.Rule{Name: "daily", Limit: 1000, Algorithm: policy.FixedWindow, Period: policy.Day, TimeZone: "America/New_York"}, c.Rules[0])
	assert.Equal(t, policy.Rule{Name: "monthly", Limit: 5, Algorithm: policy.FixedWindow, Period: policy.Month, Mode: policy.Strict}, c.Rules[1])
	var buf bytes.Buffer
	require.NoError(t, c.Encode(&buf))
	assert.Contains(t, buf.String(), "period: day")
	back, err := policy.Load(&buf)
	require.NoError(t, err)
	assert.Equal(t, c.Rules, back.Rules)

	e, err := policy.Load(strings.NewReader("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: day, requests_per_unit: 5}}\n"))
	require.NoError(t, err)
	assert.Equal(t, policy.NoPeriod, e.Rules[0].Period, "envoy's day is 24 hours, as envoy counts it")
	assert.Equal(t, 24*time.Hour, e.Rules[0].Window)
}

// TestLoadErrors: malformed files give a ConfigError naming the line and
// field and saying how to fix it; never a panic.
func TestLoadErrors(t *testing.T) {
	t.Parallel()
	deep := "domain: d\ndescriptors:\n"
	for i := 0; i < policy.MaxDescriptorDepth+2; i++ {
		ind := strings.Repeat("  ", 2*i)
		deep += ind + "- key: k\n" + ind + "  descriptors:\n"
	}
	tests := []struct {
		name, yaml string
		line       int
		want       []string
	}{
		{"empty", "", 0, []string{"empty"}},
		{"neither format", "foo: 1\n", 1, []string{"neither format"}},
		{"both formats", "rules: []\ndomain: d\n", 1, []string{"keep one format"}},
		{"syntax", "rules:\n  - name: [a\n", 0, []string{"YAML syntax"}},
		{"two documents", "domain: d\n---\ndomain: e\n", 2, []string{"second YAML document"}},
		{"misspelled rule field", "rules:\n  - name: a\n    limt: 1\n    window: 1s\n", 3, []string{`unknown field "limt"`, `did you mean "limit"`}},
		{"duplicate field", "rules:\n  - name: a\n    limit: 1\n    limit: 2\n    window: 1s\n", 4, []string{"rules[0].limit", "appears twice"}},
		{"duplicate rule", "rules:\n  - {name: a, limit: 1, window: 1s}\n  - {name: a, limit: 1, window: 1s}\n", 3, []string{`rule "a" appears twice`}},
		{"wrong type limit", "rules:\n  - name: a\n    limit: many\n    window: 1s\n", 3, []string{"rules[0].limit", `"many", a str`, "whole number"}},
		{"huge limit", "rules:\n  - name: a\n    limit: 99999999999999999999999\n    window: 1s\n", 3, []string{"write a whole number"}},
		{"window without unit", "rules:\n  - name: a\n    limit: 1\n    window: 60\n", 4, []string{"needs a unit"}},
		{"window in days", "rules:\n  - name: a\n    limit: 1\n    window: 1d\n", 4, []string{"24h"}},
		{"huge window", "rules:\n  - name: a\n    limit: 1\n    window: 99999999999h\n", 4, []string{"not a duration"}},
		{"invalid rule", "rules:\n  - name: a\n    limit: 1\n    window: 1s\n    precision: 7\n", 2, []string{"rules[0]", "Precision"}},
		{"bad algorithm", "rules:\n  - name: a\n    limit: 1\n    window: 1s\n    algorithm: slidng\n", 5, []string{`did you mean "sliding"`}},
		{"bool as string", "rules:\n  - name: a\n    limit: 0\n    window: 1s\n    deny: yes\n", 5, []string{"true or false"}},
		{"overrides not a list", "rules:\n  - name: a\n    limit: 1\n    window: 1s\n    overrides: {tier: x}\n", 5, []string{"write a list"}},
		{"override key twice", "rules:\n  - name: a\n    limit: 1\n    window: 1s\n    overrides:\n      - {tier: x, limit: 2, keys: [k]}\n      - {tier: y, limit: 3, keys: [k]}\n", 2, []string{`key "k" is in override tiers "x" and "y"`}},
		{"anchor", "rules:\n  - &r {name: a, limit: 1, window: 1s}\n  - *r\n", 3, []string{"anchors and aliases"}},
		{"rules not a list", "rules: 3\n", 1, []string{"write a list"}},
		{"unknown period", "rules:\n  - name: a\n    limit: 1\n    period: fortnight\n", 4, []string{"rules[0].period", `"fortnight" is not a period`, "day, week or month"}},
		{"unknown time zone", "rules:\n  - name: a\n    limit: 1\n    period: day\n    time_zone: Europe/Atlantis\n", 2, []string{"rules[0]", `TimeZone "Europe/Atlantis" is not a known time zone`}},
		{"period with a window", "rules:\n  - {name: a, limit: 1, period: week, window: 24h}\n", 2, []string{"remove Window"}},
		{"period on a sliding window", "rules:\n  - {name: a, limit: 1, period: week, algorithm: sliding}\n", 2, []string{"policy.FixedWindow"}},
		{"time zone without a period", "rules:\n  - {name: a, limit: 1, window: 1s, time_zone: UTC}\n", 2, []string{"without a Period"}},
		{"envoy no domain", "descriptors: []\n", 1, []string{"domain", "missing"}},
		{"envoy duplicate descriptor", "domain: d\ndescriptors:\n  - key: a\n  - key: a\n", 4, []string{"duplicate descriptor d.a"}},
		{"envoy duplicate value", "domain: d\ndescriptors:\n  - {key: a, value: v}\n  - {key: a, value: v}\n", 4, []string{"duplicate descriptor d.a_v"}},
		{"envoy duplicate wildcard", "domain: d\ndescriptors:\n  - {key: a, value: v*}\n  - {key: a, value: v*}\n", 4, []string{"duplicate descriptor d.a_v*"}},
		{"envoy misspelled", "domain: d\ndescriptors:\n  - key: a\n    ratelimit: {unit: second, requests_per_unit: 1}\n", 4, []string{`"ratelimit"`, `did you mean "rate_limit"`}},
		{"envoy misspelled in rate_limit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unt: 1}\n", 4, []string{`did you mean "requests_per_unit"`}},
		{"envoy non-string key", "domain: d\ndescriptors:\n  - key: a\n    ? [x]\n    : 1\n", 4, []string{"field name"}},
		{"envoy list of non-maps", "domain: d\ndescriptors:\n  - a\n", 3, []string{"write a mapping"}},
		{"envoy empty key", "domain: d\ndescriptors:\n  - value: v\n", 3, []string{"key", "every descriptor needs a key"}},
		{"envoy bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", 4, []string{`"fortnight" is not a unit`}},
		{"envoy no unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n", 4, []string{"unit", "is missing"}},
		{"envoy unlimited with unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", 4, []string{"unlimited"}},
		{"envoy replaces self", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n", 4, []string{"cannot replace itself"}},
		{"envoy replaces empty", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: \"\"}]}\n", 4, []string{"replaces[0].name"}},
		{"envoy zero multiplier", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 0}\n", 4, []string{"unit_multiplier", "out of range"}},
		{"envoy rpu beyond uint32", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", 4, []string{"out of range"}},
		{"envoy rpu negative", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", 4, []string{"out of range"}},
		{"envoy newer field", "domain: d\ndescriptors:\n  - key: a\n    quota_mode: true\n", 4, []string{"newer envoy ratelimit", "remove it"}},
		{"envoy too deep", deep, 0, []string{"deeper than 16 levels"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := policy.Load(strings.NewReader(tt.yaml))
			require.Error(t, err)
			assert.ErrorIs(t, err, policy.ErrInvalidConfig)
			var ce *policy.ConfigError
			require.ErrorAs(t, err, &ce)
			if tt.line > 0 {
				assert.Equal(t, tt.line, ce.Line, err.Error())
			}
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestLoadFileErrorNamesFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte("rules:\n  - name: a\n    limit: x\n"), 0o600))
	_, err := policy.LoadFile(path)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), path+":3:"), err.Error())
	_, err = policy.LoadFile(filepath.Join(t.TempDir(), "missing.yaml"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestLoadBounded: a 10 MB file is refused after reading MaxConfigSize+1
// bytes, not held whole.
func TestLoadBounded(t *testing.T) {
	t.Parallel()
	r := &countingReader{left: 10 << 20}
	_, err := policy.Load(r)
	require.ErrorIs(t, err, policy.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "larger than")
	assert.LessOrEqual(t, r.read, int64(policy.MaxConfigSize+64<<10), "reads past the bound")

	// Deeply nested YAML flow collections, within the size bound.
	_, err = policy.Load(strings.NewReader("rules: " + strings.Repeat("[", 100000)))
	require.Error(t, err)
	_, err = policy.Load(strings.NewReader("rules:\n  - name: " + strings.Repeat("[", 5000) + strings.Repeat("]", 5000)))
	require.Error(t, err)
}

type countingReader struct{ left, read int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, errors.New("EOF")
	}
	n := min(int64(len(p)), c.left)
	for i := range p[:n] {
		p[i] = '#'
	}
	c.left -= n
	c.read += n
	return int(n), nil
}

// BenchmarkMatch measures Match on an envoy configuration: an exact match,
// a default (the key is the value) and two variable entries (the key is
// built).
func BenchmarkMatch(b *testing.B) {
	c, err := policy.LoadFile("testdata/envoy/features.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name    string
		entries []policy.Entry
	}{
		{"default", []policy.Entry{{Key: "api", Value: "k1"}}},
		{"nested-exact", []policy.Entry{{Key: "api", Value: "k1"}, {Key: "method", Value: "GET"}}},
		{"two-variable", []policy.Entry{{Key: "api", Value: "k1"}, {Key: "batch", Value: "b2"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, ok := c.Match(bc.entries...); !ok {
					b.Fatal("no match")
				}
			}
		})
	}
}
