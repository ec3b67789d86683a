package policy_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

// FuzzLoad loads arbitrary bytes. It must never panic; an error is a
// one-line ConfigError wrapping ErrInvalidConfig; an accepted file's rules
// all validate, a sluice file encodes and loads back to the same rules,
// and Match on any entries names one of the rules or nothing.
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"testdata/envoy", "testdata/sluice"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, "k", "v")
		}
	}
	f.Add([]byte("rules:\n  - {name: a, limit: 1, window: 1s}\n"), "a", "x")
	f.Add([]byte("rules:\n  - {name: a, limit: 1, period: day, time_zone: Europe/Berlin}\n  - {name: b, limit: 9, period: Month, algorithm: fixed, mode: strict}\n"), "b", "x")
	f.Add([]byte("rules:\n  - {name: a, limit: 1, period: fortnight, time_zone: Nowhere/Else}\n"), "a", "x")
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: a, value: b*, rate_limit: {unit: second, requests_per_unit: 0}}\n"), "a", "bc")
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		c, err := policy.Load(bytes.NewReader(data))
		if err != nil {
			var ce *policy.ConfigError
			if !errorsAs(err, &ce) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q: want a one-line *ConfigError", err)
			}
			return
		}
		names := map[string]bool{}
		for _, r := range c.Rules {
			if err := r.Validate(); err != nil {
				t.Fatalf("loaded an invalid rule: %v", err)
			}
			names[r.Name] = true
		}
		if rule, _, ok := c.Match(policy.Entry{Key: key, Value: value}); ok && !names[rule] {
			t.Fatalf("Match named %q, not a rule of the config", rule)
		}
		if c.Format != policy.FormatSluice {
			return
		}
		var buf bytes.Buffer
		if err := c.Encode(&buf); err != nil {
			t.Fatal(err)
		}
		back, err := policy.Load(&buf)
		if err != nil {
			t.Fatalf("encoded rules do not load: %v\n%s", err, buf.String())
		}
		if !rulesEqual(c.Rules, back.Rules) {
			t.Fatalf("round trip changed the rules:\n%+v\n%+v", c.Rules, back.Rules)
		}
	})
}

// FuzzMatch checks Match against a reference written from envoy
// ratelimit's documented lookup, walking Config.Descriptors with the
// joined "key_value" strings envoy compares: the same rule, or none, for
// any entries; and a key that is a function of the values counted apart.
func FuzzMatch(f *testing.F) {
	files, _ := filepath.Glob("testdata/envoy/*.yaml")
	var configs []policy.Config
	for _, p := range files {
		c, err := policy.LoadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		configs = append(configs, c)
	}
	f.Add(uint8(0), "tenant", "acme", "user", "bob", "", "", uint8(2))
	f.Add(uint8(1), "client", "bot-x", "", "", "", "", uint8(1))
	f.Add(uint8(2), "api", "a/b", "batch", `c\`, "", "", uint8(2))
	f.Fuzz(func(t *testing.T, which uint8, k1, v1, k2, v2, k3, v3 string, n uint8) {
		c := configs[int(which)%len(configs)]
		entries := []policy.Entry{{k1, v1}, {k2, v2}, {k3, v3}}[:1+int(n)%3]
		rule, key, ok := c.Match(entries...)
		wantRule, vars := reference(c.Descriptors, entries)
		if ok != (wantRule != "") || rule != wantRule {
			t.Fatalf("Match(%q) = %q, %v; envoy's lookup gives %q", entries, rule, ok, wantRule)
		}
		if !ok {
			return
		}
		var want string
		if len(vars) == 1 {
			want = vars[0]
		} else {
			esc := make([]string, len(vars))
			for i, v := range vars {
				esc[i] = strings.NewReplacer(`\`, `\\`, `/`, `\/`).Replace(v)
			}
			want = strings.Join(esc, "/")
		}
		if key != want {
			t.Fatalf("Match(%q) key %q, want %q", entries, key, want)
		}
	})
}

// reference is envoy ratelimit's lookup on the descriptor tree: the rule
// of the descriptor the last entry matched, and the values of the entries
// that matched a wildcard or a default.
func reference(descs []policy.Descriptor, entries []policy.Entry) (string, []string) {
	var vars []string
	for i, e := range entries {
		final := e.Key + "_" + e.Value
		var next *policy.Descriptor
		for j := range descs {
			// Key and value compared apart: envoy compares the joined
			// strings, so that its key "a_b" with value "c" would also
			// find the descriptor a: b_c (docs/configuration.md).
			if d := &descs[j]; d.Value != "" && d.Key == e.Key && d.Value == e.Value {
				next = d
			}
		}
		variable := next == nil
		for j := range descs {
			d := &descs[j]
			full := d.Key
			if d.Value != "" {
				full += "_" + d.Value
			}
			if next == nil && strings.HasSuffix(full, "*") && strings.HasPrefix(final, strings.TrimSuffix(full, "*")) {
				next = d
			}
		}
		for j := range descs {
			if d := &descs[j]; next == nil && d.Value == "" && d.Key == e.Key {
				next = d
			}
		}
		if next == nil {
			return "", nil
		}
		if variable {
			vars = append(vars, e.Value)
		}
		if i == len(entries)-1 {
			return next.Rule, vars
		}
		descs = next.Descriptors
	}
	return "", nil
}

func errorsAs(err error, target **policy.ConfigError) bool { return errors.As(err, target) }

func rulesEqual(a, b []policy.Rule) bool { return reflect.DeepEqual(a, b) }
