package policy

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// maxRules bounds the rules of one configuration file in sluice's format
// (stated in config.go's bounds and docs/configuration.md).
const maxRules = 10_000

var (
	sluiceTop      = []string{"rules"}
	sluiceRule     = []string{"name", "limit", "window", "algorithm", "precision", "burst", "warm_up", "mode", "soft", "ceiling", "capacity", "shadow", "deny", "overrides", "in_flight", "period", "time_zone"}
	sluiceOverride = []string{"tier", "keys", "limit", "burst", "unlimited", "deny"}
	algorithms     = []Algorithm{SlidingWindow, FixedWindow, WeightedWindow, TokenBucket, GCRA, SlidingLog}
	modes          = []Mode{ModeDefault, Eventual, Local, Strict}
)

// loadSluice decodes sluice's format.
func loadSluice(top *yaml.Node) (Config, error) {
	c := Config{Format: FormatSluice}
	names := map[string]bool{}
	err := fields(top, "", sluiceTop, func(_ string, v *yaml.Node, field string) error {
		if v.Kind == yaml.SequenceNode && len(v.Content) > maxRules {
			return errAt(v, field, "has %d rules; the most is %d", len(v.Content), maxRules)
		}
		return list(v, field, func(_ int, rn *yaml.Node, field string) error {
			r, err := decodeRule(rn, field)
			if err != nil {
				return err
			}
			if names[r.Name] {
				return errAt(rn, field+".name", "rule %q appears twice: every rule needs a unique name", r.Name)
			}
			names[r.Name] = true
			c.Rules = append(c.Rules, r)
			return nil
		})
	})
	if err != nil {
		return Config{}, err
	}
	if len(c.Rules) == 0 {
		return Config{}, errAt(top, "rules", "is empty: write at least one rule (name, limit, window)")
	}
	// Match: one entry, its key a rule name (a default: any value, the key).
	c.root = newNode()
	for _, r := range c.Rules {
		c.root.deflt[r.Name] = &node{key: r.Name, rule: r.Name, limited: true}
	}
	return c, nil
}

func decodeRule(n *yaml.Node, at string) (Rule, error) {
	var r Rule
	err := fields(n, at, sluiceRule, func(key string, v *yaml.Node, field string) (err error) {
		switch key {
		case "name":
			r.Name, err = str(v, field)
		case "limit":
			r.Limit, err = integer(v, field, 0, MaxLimit)
		case "window":
			r.Window, err = duration(v, field)
		case "algorithm":
			var s string
			if s, err = str(v, field); err == nil {
				r.Algorithm, err = parseEnum(v, field, s, algorithms)
			}
		case "precision":
			var p int64
			p, err = integer(v, field, 0, MaxPrecision)
			r.Precision = int(p)
		case "burst":
			r.Burst, err = integer(v, field, 0, MaxLimit)
		case "warm_up":
			r.WarmUp, err = duration(v, field)
		case "mode":
			var s string
			if s, err = str(v, field); err == nil {
				r.Mode, err = parseEnum(v, field, s, modes)
			}
		case "soft":
			r.Soft, err = number(v, field, 0, 1e6)
		case "ceiling":
			r.Ceiling, err = integer(v, field, 0, MaxLimit)
		case "capacity":
			r.Capacity, err = str(v, field)
		case "shadow":
			r.Shadow, err = boolean(v, field)
		case "deny":
			r.Deny, err = boolean(v, field)
		case "in_flight":
			r.InFlight, err = boolean(v, field)
		case "period":
			var s string
			if s, err = str(v, field); err == nil {
				if r.Period, err = parsePeriod(s); err != nil {
					err = errAt(v, field, "%v", err)
				}
			}
		case "time_zone":
			r.TimeZone, err = str(v, field)
		case "overrides":
			err = list(v, field, func(_ int, on *yaml.Node, field string) error {
				o, err := decodeOverride(on, field)
				r.Overrides = append(r.Overrides, o)
				return err
			})
		}
		return err
	})
	if err != nil {
		return Rule{}, err
	}
	if r.calendar() && !hasField(n, "algorithm") {
		r.Algorithm = FixedWindow // a calendar period is a fixed window
	}
	if err := r.Validate(); err != nil {
		return Rule{}, ruleErr(n, at, err)
	}
	return r, nil
}

// hasField reports whether mapping n has the field key.
func hasField(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

func decodeOverride(n *yaml.Node, at string) (Override, error) {
	var o Override
	err := fields(n, at, sluiceOverride, func(key string, v *yaml.Node, field string) (err error) {
		switch key {
		case "tier":
			o.Tier, err = str(v, field)
		case "keys":
			err = list(v, field, func(_ int, kn *yaml.Node, field string) error {
				k, err := str(kn, field)
				o.Keys = append(o.Keys, k)
				return err
			})
		case "limit":
			o.Limit, err = integer(v, field, 0, MaxLimit)
		case "burst":
			o.Burst, err = integer(v, field, 0, MaxLimit)
		case "unlimited":
			o.Unlimited, err = boolean(v, field)
		case "deny":
			o.Deny, err = boolean(v, field)
		}
		return err
	})
	return o, err
}

// parseEnum finds s among the names of values.
func parseEnum[T fmt.Stringer](n *yaml.Node, field, s string, values []T) (T, error) {
	names := make([]string, len(values))
	for i, v := range values {
		if v.String() == strings.ToLower(s) {
			return v, nil
		}
		names[i] = v.String()
	}
	var zero T
	msg := fmt.Sprintf("%q is not one of %s", s, strings.Join(names, ", "))
	if near := nearest(s, names); near != "" {
		msg += fmt.Sprintf(": did you mean %q?", near)
	}
	return zero, errAt(n, field, "%s", msg)
}

// Encode writes c's rules in sluice's format, every field that is not zero;
// Load reads it back to the same rules. An envoy file's rules come out as
// sluice rules (its descriptor tree does not: Match needs the envoy file).
func (c Config) Encode(w io.Writer) error {
	rules := &yaml.Node{Kind: yaml.SequenceNode}
	for _, r := range c.Rules {
		m := &yaml.Node{Kind: yaml.MappingNode}
		add(m, "name", scalar(r.Name, "!!str"))
		if r.Limit != 0 || !r.Deny {
			add(m, "limit", integerNode(r.Limit))
		}
		if !r.InFlight && !r.calendar() {
			add(m, "window", scalar(durationString(r.Window), "!!str"))
		}
		if r.calendar() {
			add(m, "period", scalar(r.Period.String(), "!!str"))
		}
		if r.TimeZone != "" {
			add(m, "time_zone", scalar(r.TimeZone, "!!str"))
		}
		if r.Algorithm != SlidingWindow {
			add(m, "algorithm", scalar(r.Algorithm.String(), "!!str"))
		}
		if r.Precision != 0 {
			add(m, "precision", integerNode(int64(r.Precision)))
		}
		if r.Burst != 0 {
			add(m, "burst", integerNode(r.Burst))
		}
		if r.WarmUp != 0 {
			add(m, "warm_up", scalar(durationString(r.WarmUp), "!!str"))
		}
		if r.Mode != ModeDefault {
			add(m, "mode", scalar(r.Mode.String(), "!!str"))
		}
		if r.Soft != 0 {
			add(m, "soft", scalar(strconv.FormatFloat(r.Soft, 'g', -1, 64), "!!float"))
		}
		if r.Ceiling != 0 {
			add(m, "ceiling", integerNode(r.Ceiling))
		}
		if r.Capacity != "" {
			add(m, "capacity", scalar(r.Capacity, "!!str"))
		}
		if r.Shadow {
			add(m, "shadow", scalar("true", "!!bool"))
		}
		if r.Deny {
			add(m, "deny", scalar("true", "!!bool"))
		}
		if r.InFlight {
			add(m, "in_flight", scalar("true", "!!bool"))
		}
		if len(r.Overrides) > 0 {
			os := &yaml.Node{Kind: yaml.SequenceNode}
			for _, o := range r.Overrides {
				on := &yaml.Node{Kind: yaml.MappingNode}
				add(on, "tier", scalar(o.Tier, "!!str"))
				switch {
				case o.Unlimited:
					add(on, "unlimited", scalar("true", "!!bool"))
				case o.Deny:
					add(on, "deny", scalar("true", "!!bool"))
				}
				if o.Limit != 0 {
					add(on, "limit", integerNode(o.Limit))
				}
				if o.Burst != 0 {
					add(on, "burst", integerNode(o.Burst))
				}
				keys := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
				for _, k := range o.Keys {
					keys.Content = append(keys.Content, scalar(k, "!!str"))
				}
				add(on, "keys", keys)
				os.Content = append(os.Content, on)
			}
			add(m, "overrides", os)
		}
		rules.Content = append(rules.Content, m)
	}
	top := &yaml.Node{Kind: yaml.MappingNode}
	add(top, "rules", rules)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(top); err != nil {
		return fmt.Errorf("policy: encode: %w", err)
	}
	return enc.Close()
}

func add(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, scalar(key, "!!str"), v)
}

func scalar(v, tag string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v}
}

func integerNode(v int64) *yaml.Node { return scalar(strconv.FormatInt(v, 10), "!!int") }

// durationString writes d as time.Duration does, which ParseDuration reads
// back exactly.
func durationString(d time.Duration) string { return d.String() }
