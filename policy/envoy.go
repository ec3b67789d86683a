package policy

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

var (
	envoyTop        = []string{"domain", "descriptors"}
	envoyDescriptor = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric"}
	envoyRateLimit  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "unit_multiplier"}
	envoyReplaces   = []string{"name"}
	// envoyLater are fields of newer envoy ratelimit releases that change
	// decisions in ways sluice does not model; a file using them is refused
	// with this word rather than loaded with a different meaning.
	envoyLater = []string{"quota_mode", "share_threshold", "value_to_metric", "metadata"}
	envoyUnits = map[string]time.Duration{
		"second": time.Second,
		"minute": time.Minute,
		"hour":   time.Hour,
		"day":    24 * time.Hour,
		"week":   7 * 24 * time.Hour,
		"month":  30 * 24 * time.Hour,
		"year":   365 * 24 * time.Hour,
	}
)

// loadEnvoy decodes an envoy ratelimit configuration. Each descriptor with
// a limited rate_limit becomes a FixedWindow rule (envoy counts in windows
// aligned on the unit), named after the descriptor's path; requests_per_unit
// 0 becomes a Deny rule.
func loadEnvoy(top *yaml.Node) (Config, error) {
	c := Config{Format: FormatEnvoy, root: newNode()}
	names := map[string]string{}
	var descs *yaml.Node
	err := fields(top, "", envoyTop, func(key string, v *yaml.Node, field string) (err error) {
		switch key {
		case "domain":
			c.Domain, err = str(v, field)
		case "descriptors":
			descs = v
		}
		return err
	})
	if err != nil {
		return Config{}, err
	}
	if c.Domain == "" {
		return Config{}, errAt(top, "domain", "is missing or empty: an envoy ratelimit file needs a domain")
	}
	if descs != nil {
		l := &envoyLoader{c: &c, names: names}
		c.Descriptors, err = l.descriptors(descs, "descriptors", c.root, c.Domain, 1)
		if err != nil {
			return Config{}, err
		}
	}
	return c, nil
}

type envoyLoader struct {
	c     *Config
	names map[string]string // rule name → the path it was made from
}

// descriptors decodes the descriptor list n under parent, whose path (for
// rule names) is path.
func (l *envoyLoader) descriptors(n *yaml.Node, at string, parent *node, path string, depth int) ([]Descriptor, error) {
	if depth > MaxDescriptorDepth {
		return nil, errAt(n, at, "descriptors nest deeper than %d levels: flatten them", MaxDescriptorDepth)
	}
	var out []Descriptor
	err := list(n, at, func(_ int, dn *yaml.Node, field string) error {
		d, sub, err := l.descriptor(dn, field)
		if err != nil {
			return err
		}
		final := d.Key
		if d.Value != "" {
			final += "_" + d.Value
		}
		child := newNode()
		child.key = d.Key
		switch {
		case strings.HasSuffix(final, "*"):
			for _, w := range parent.wild {
				if w.full == final {
					return errAt(dn, field, "duplicate descriptor %s.%s: merge the two", path, final)
				}
			}
			parent.wild = append(parent.wild, wildcard{pattern: strings.TrimSuffix(final, "*"), full: final, n: child})
		case d.Value != "":
			k := entryKey{d.Key, d.Value}
			if parent.exact[k] != nil {
				return errAt(dn, field, "duplicate descriptor %s.%s: merge the two", path, final)
			}
			parent.exact[k] = child
		default:
			if parent.deflt[d.Key] != nil {
				return errAt(dn, field, "duplicate descriptor %s.%s: merge the two", path, final)
			}
			parent.deflt[d.Key] = child
		}
		full := path + "." + final
		if d.RateLimit != nil && !d.RateLimit.Unlimited {
			r := Rule{
				Name:      ruleName(full),
				Limit:     d.RateLimit.RequestsPerUnit,
				Window:    envoyUnits[strings.ToLower(d.RateLimit.Unit)] * time.Duration(max(d.RateLimit.UnitMultiplier, 1)),
				Algorithm: FixedWindow,
				Deny:      d.RateLimit.RequestsPerUnit == 0,
				Shadow:    d.ShadowMode,
			}
			if prev, dup := l.names[r.Name]; dup {
				return errAt(dn, field, "descriptors %s and %s make the same rule name %q: rename a key or value", prev, full, r.Name)
			}
			l.names[r.Name] = full
			if err := r.Validate(); err != nil {
				return ruleErr(dn, field+".rate_limit", err)
			}
			d.Rule = r.Name
			child.rule = r.Name
			l.c.Rules = append(l.c.Rules, r)
		}
		child.limited = d.RateLimit != nil
		if sub != nil {
			d.Descriptors, err = l.descriptors(sub, field+".descriptors", child, full, depth+1)
			if err != nil {
				return err
			}
		}
		out = append(out, d)
		return nil
	})
	return out, err
}

// descriptor decodes one descriptor's own fields; sub is its nested list.
func (l *envoyLoader) descriptor(n *yaml.Node, at string) (d Descriptor, sub *yaml.Node, err error) {
	known := append(envoyDescriptor[:len(envoyDescriptor):len(envoyDescriptor)], envoyLater...)
	err = fields(n, at, known, func(key string, v *yaml.Node, field string) (err error) {
		switch key {
		case "key":
			d.Key, err = str(v, field)
		case "value":
			d.Value, err = str(v, field)
		case "rate_limit":
			d.RateLimit, err = rateLimit(v, field)
		case "descriptors":
			sub = v
		case "shadow_mode":
			d.ShadowMode, err = boolean(v, field)
		case "detailed_metric":
			d.DetailedMetric, err = boolean(v, field)
		default:
			err = errAt(v, field, "is a field of newer envoy ratelimit releases that sluice does not support: remove it")
		}
		return err
	})
	if err == nil && d.Key == "" {
		err = errAt(n, at+".key", "is missing or empty: every descriptor needs a key")
	}
	return d, sub, err
}

func rateLimit(n *yaml.Node, at string) (*RateLimit, error) {
	rl := &RateLimit{}
	var unit *yaml.Node
	err := fields(n, at, append(envoyRateLimit[:len(envoyRateLimit):len(envoyRateLimit)], envoyLater...), func(key string, v *yaml.Node, field string) (err error) {
		switch key {
		case "unit":
			unit = v
			rl.Unit, err = str(v, field)
		case "requests_per_unit":
			rl.RequestsPerUnit, err = integer(v, field, 0, MaxLimit)
		case "unlimited":
			rl.Unlimited, err = boolean(v, field)
		case "name":
			rl.Name, err = str(v, field)
		case "unit_multiplier":
			rl.UnitMultiplier, err = integer(v, field, 1, int64(MaxWindow/time.Second))
		case "replaces":
			err = list(v, field, func(_ int, rn *yaml.Node, field string) error {
				var name string
				err := fields(rn, field, envoyReplaces, func(_ string, v *yaml.Node, field string) (err error) {
					name, err = str(v, field)
					return err
				})
				if err == nil && name == "" {
					err = errAt(rn, field+".name", "is empty: name the rate limit this one replaces")
				}
				rl.Replaces = append(rl.Replaces, name)
				return err
			})
		default:
			err = errAt(v, field, "is a field of newer envoy ratelimit releases that sluice does not support: remove it")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	unitDur, validUnit := envoyUnits[strings.ToLower(rl.Unit)]
	switch {
	case rl.Unlimited && validUnit:
		return nil, errAt(unit, at+".unit", "is set on an unlimited rate limit: remove unit (or unlimited)")
	case !rl.Unlimited && !validUnit:
		if unit == nil {
			return nil, errAt(n, at+".unit", "is missing: use second, minute, hour, day, week, month or year")
		}
		return nil, errAt(unit, at+".unit", "%q is not a unit: use second, minute, hour, day, week, month or year", rl.Unit)
	case !rl.Unlimited && unitDur*time.Duration(max(rl.UnitMultiplier, 1)) > MaxWindow:
		return nil, errAt(n, at+".unit_multiplier", "makes a window longer than %v: lower it", MaxWindow)
	}
	for _, r := range rl.Replaces {
		if r == rl.Name {
			return nil, errAt(n, at+".replaces", "names the limit itself (%q): a limit cannot replace itself", r)
		}
	}
	return rl, nil
}

// ruleName makes a rule name of a descriptor path: the path with every
// byte a name cannot hold turned to '_'; if that changed it, or it is too
// long, a prefix and a hash of the path, so that distinct paths make
// distinct names.
func ruleName(path string) string {
	b := []byte(path)
	changed := false
	for i, c := range b {
		if !nameByte(c) {
			b[i], changed = '_', true
		}
	}
	if !changed && len(b) <= maxNameLength {
		return path
	}
	h := fnv.New64a()
	h.Write([]byte(path))
	suffix := fmt.Sprintf("-%016x", h.Sum64())
	return string(b[:min(len(b), maxNameLength-len(suffix))]) + suffix
}
