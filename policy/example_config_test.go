package policy_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/sluicehq/sluice/policy"
)

// Load reads sluice's own format: durations as "1m", per-key overrides in
// named tiers, comments.
func ExampleLoad() {
	cfg, err := policy.Load(strings.NewReader(`
rules:
  - name: api            # 100 per minute per key
    limit: 100
    window: 1m
    overrides:
      - tier: pro        # a higher plan, without a rule per customer
        limit: 1000
        keys: [acme, globex]
      - tier: internal   # allow-listed
        unlimited: true
        keys: [billing]
  - name: login
    limit: 5
    window: 15m
    mode: strict
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range cfg.Rules {
		fmt.Println(r.Name, r.Limit, r.Window, r.Mode, len(r.Overrides))
	}
	// Output:
	// api 100 1m0s default 2
	// login 5 15m0s strict 0
}

// Load reads an envoy ratelimit configuration as it is; its errors name
// the line and field and say how to fix them.
func ExampleLoad_envoy() {
	_, err := policy.Load(strings.NewReader(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unt: 60
`))
	fmt.Println(err)
	// Output:
	// config:7:7: descriptors[0].rate_limit: unknown field "requests_per_unt": did you mean "requests_per_unit"?
}

// LoadFile reads a file; its errors start with the file's name.
func ExampleLoadFile() {
	cfg, err := policy.LoadFile("testdata/envoy/wildcard.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Format, cfg.Domain, len(cfg.Rules))
	// Output: envoy wild 4
}

// Match resolves a request's descriptor as envoy ratelimit does: the most
// specific descriptor, value-less defaults counted per value, trailing-'*'
// wildcards, and no limit for allow-listed values or unlimited ones.
func ExampleConfig_Match() {
	cfg, err := policy.Load(strings.NewReader(`
domain: shop
descriptors:
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: path
    value: /checkout
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /health
  - key: client
    value: bot-*
    rate_limit: {unit: minute, requests_per_unit: 5}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range []policy.Entry{
		{Key: "path", Value: "/cart"},
		{Key: "path", Value: "/checkout"},
		{Key: "path", Value: "/health"},
		{Key: "client", Value: "bot-crawler"},
	} {
		rule, key, ok := cfg.Match(e)
		fmt.Printf("%s=%s -> %q %q %v\n", e.Key, e.Value, rule, key, ok)
	}
	// Output:
	// path=/cart -> "shop.path" "/cart" true
	// path=/checkout -> "shop.path__checkout-24a46df938fe23c8" "" true
	// path=/health -> "" "" false
	// client=bot-crawler -> "shop.client_bot-_-c139fba08057d7d7" "bot-crawler" true
}

// Encode writes rules in sluice's format: an envoy file converted, or rules
// built in Go, to edit as a file.
func ExampleConfig_Encode() {
	cfg, err := policy.LoadFile("testdata/envoy/features.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.Rules = cfg.Rules[:2]
	if err := cfg.Encode(os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// rules:
	//   - name: edge.api
	//     limit: 100
	//     window: 1m0s
	//     algorithm: fixed
	//   - name: edge.api.method_DELETE
	//     window: 1m0s
	//     algorithm: fixed
	//     deny: true
}

// Tier returns the rule an override's keys are decided under.
func ExampleRule_Tier() {
	api := policy.Rule{Name: "api", Limit: 100, Window: 60e9, Overrides: []policy.Override{
		{Tier: "pro", Limit: 1000, Keys: []string{"acme"}},
	}}
	pro, ok := api.Tier("pro")
	fmt.Println(pro.Name, pro.Limit, pro.Window, ok)
	// Output: api/pro 1000 1m0s true
}
