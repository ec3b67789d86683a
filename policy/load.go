package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ConfigError is what is wrong with a configuration file, where, and how
// to fix it. It wraps ErrInvalidConfig (and ErrInvalidRule for a rule that
// does not validate).
type ConfigError struct {
	// File is the file's path; empty for Load.
	File string
	// Line and Column locate the problem, from 1; 0 when it is the whole
	// file's (its size, its syntax without a position).
	Line, Column int
	// Field is the path of the field, as "rules[2].window"; empty for the
	// whole file.
	Field string
	// Msg says what is wrong and how to fix it.
	Msg string

	err error // wrapped besides ErrInvalidConfig
}

// Error returns "file:line:col: field: message".
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.File == "" {
		b.WriteString("config")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// Unwrap returns ErrInvalidConfig and the cause, if any.
func (e *ConfigError) Unwrap() []error {
	if e.err != nil {
		return []error{ErrInvalidConfig, e.err}
	}
	return []error{ErrInvalidConfig}
}

// LoadFile reads the configuration file at path (see Load); its errors name
// the file.
func LoadFile(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("policy: load: %w", err)
	}
	defer f.Close()
	c, err := Load(f)
	var ce *ConfigError
	if errors.As(err, &ce) {
		ce.File = path
	}
	return c, err
}

// Load reads a configuration: sluice's own format (a top-level "rules"
// list) or an envoy ratelimit configuration as-is (a top-level "domain"
// and "descriptors"), detected from the top-level fields. It reads at most
// MaxConfigSize bytes. Every rule is validated; an error is a
// *ConfigError that names the line and field and says how to fix it.
// Unknown fields, duplicate fields and duplicate descriptors are errors.
// See docs/configuration.md for both formats.
func Load(r io.Reader) (Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxConfigSize+1))
	if err != nil {
		return Config{}, fmt.Errorf("policy: load: %w", err)
	}
	if len(data) > MaxConfigSize {
		return Config{}, &ConfigError{Msg: fmt.Sprintf("the file is larger than %d bytes: split the rules, or check that this is the right file", MaxConfigSize)}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, &ConfigError{Msg: "the file is empty: write a top-level \"rules\" list (sluice) or \"domain\" and \"descriptors\" (envoy ratelimit)"}
		}
		return Config{}, syntaxError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			return Config{}, syntaxError(err)
		}
		return Config{}, &ConfigError{Line: line, Column: 1, Msg: "a second YAML document: a configuration is one document; remove the \"---\" and what follows, or split the files"}
	}
	top := &doc
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	if err := checkNodes(top); err != nil {
		return Config{}, err
	}
	if top.Kind != yaml.MappingNode {
		return Config{}, errAt(top, "", "the top level is a %s: write a mapping with \"rules\" (sluice) or \"domain\" and \"descriptors\" (envoy ratelimit)", kindName(top))
	}
	var sluice, envoy bool
	for i := 0; i < len(top.Content); i += 2 {
		switch top.Content[i].Value {
		case "rules":
			sluice = true
		case "domain", "descriptors":
			envoy = true
		}
	}
	switch {
	case sluice && envoy:
		return Config{}, errAt(top, "", "the file has both \"rules\" (sluice's format) and \"domain\"/\"descriptors\" (envoy ratelimit's): keep one format per file")
	case sluice:
		return loadSluice(top)
	case envoy:
		return loadEnvoy(top)
	}
	return Config{}, errAt(top, "", "neither format: a sluice file has a top-level \"rules\" list, an envoy ratelimit file \"domain\" and \"descriptors\"")
}

// syntaxError turns a YAML parser error into a ConfigError; the parser's
// messages start with "yaml: line N: ".
func syntaxError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	ce := &ConfigError{Msg: "YAML syntax: " + msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, tail, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(n); err == nil {
				ce.Line, ce.Column, ce.Msg = line, 1, "YAML syntax: "+tail
			}
		}
	}
	return ce
}

// checkNodes refuses anchors and aliases (whose expansion can multiply a
// small file into a huge one) and nesting deeper than any configuration
// needs.
func checkNodes(n *yaml.Node) error {
	type at struct {
		n     *yaml.Node
		depth int
	}
	stack := []at{{n, 0}}
	for len(stack) > 0 {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if t.n.Kind == yaml.AliasNode || t.n.Anchor != "" {
			return errAt(t.n, "", "YAML anchors and aliases are not supported: write the value out")
		}
		if t.depth > 4*MaxDescriptorDepth+8 {
			return errAt(t.n, "", "nested too deeply: descriptors nest at most %d levels", MaxDescriptorDepth)
		}
		for _, c := range t.n.Content {
			stack = append(stack, at{c, t.depth + 1})
		}
	}
	return nil
}

// errAt returns a ConfigError at n's position.
func errAt(n *yaml.Node, field, format string, args ...any) *ConfigError {
	return &ConfigError{Line: n.Line, Column: n.Column, Field: field, Msg: fmt.Sprintf(format, args...)}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return "scalar (" + strings.TrimPrefix(n.ShortTag(), "!!") + ")"
	}
	return "YAML node"
}

// fields walks mapping n at field path at: each key must be one of known
// (else an error that suggests the nearest), at most once; f gets each
// value.
func fields(n *yaml.Node, at string, known []string, f func(key string, v *yaml.Node, field string) error) error {
	if n.Kind != yaml.MappingNode {
		return errAt(n, at, "is a %s: write a mapping with fields %s", kindName(n), strings.Join(known, ", "))
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := k.Value
		if at != "" {
			field = at + "." + k.Value
		}
		if k.Kind != yaml.ScalarNode {
			return errAt(k, at, "a field name is a %s: field names are plain words such as %s", kindName(k), known[0])
		}
		if !contains(known, k.Value) {
			msg := fmt.Sprintf("unknown field %q", k.Value)
			if s := nearest(k.Value, known); s != "" {
				msg += fmt.Sprintf(": did you mean %q?", s)
			} else {
				msg += ": the fields here are " + strings.Join(known, ", ")
			}
			return errAt(k, at, "%s", msg)
		}
		if seen[k.Value] {
			return errAt(k, field, "appears twice: keep one")
		}
		seen[k.Value] = true
		if err := f(k.Value, v, field); err != nil {
			return err
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// nearest returns the entry of known within edit distance 2 of s, if any.
func nearest(s string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(s), k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// str decodes a scalar as a string: any scalar's text (a value of 123 is
// "123", as envoy reads it); null is "".
func str(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", errAt(n, field, "is a %s: write a plain value", kindName(n))
	}
	if n.Tag == "!!null" {
		return "", nil
	}
	return n.Value, nil
}

// boolean decodes true or false.
func boolean(n *yaml.Node, field string) (bool, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return false, errAt(n, field, "is %s: write true or false", describe(n))
	}
	return n.Value == "true" || n.Value == "True" || n.Value == "TRUE", nil
}

// integer decodes a whole number in [lo, hi].
func integer(n *yaml.Node, field string, lo, hi int64) (int64, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return 0, errAt(n, field, "is %s: write a whole number between %d and %d", describe(n), lo, hi)
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil || v < lo || v > hi {
		return 0, errAt(n, field, "%s is out of range: write a whole number between %d and %d", n.Value, lo, hi)
	}
	return v, nil
}

// number decodes a number in [lo, hi].
func number(n *yaml.Node, field string, lo, hi float64) (float64, error) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
		return 0, errAt(n, field, "is %s: write a number between %g and %g", describe(n), lo, hi)
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	if err != nil || !(v >= lo && v <= hi) {
		return 0, errAt(n, field, "%s is out of range: write a number between %g and %g", n.Value, lo, hi)
	}
	return v, nil
}

// duration decodes a Go duration such as "1m" or "1h30m".
func duration(n *yaml.Node, field string) (time.Duration, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return 0, errAt(n, field, "is %s: write a duration such as 1s, 1m or 24h", describe(n))
	}
	if n.Value == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		hint := ""
		if n.Tag == "!!int" || n.Tag == "!!float" {
			hint = " (a number needs a unit)"
		} else if strings.HasSuffix(n.Value, "d") {
			hint = " (days are written in hours: 24h)"
		}
		return 0, errAt(n, field, "%q is not a duration%s: write one such as 1s, 1m or 24h", n.Value, hint)
	}
	return d, nil
}

// describe names what n is, for a type error.
func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return fmt.Sprintf("%q, a %s", v, strings.TrimPrefix(n.ShortTag(), "!!"))
	}
	return "a " + kindName(n)
}

// list walks sequence n: f gets each element and its field path.
func list(n *yaml.Node, at string, f func(i int, v *yaml.Node, field string) error) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return errAt(n, at, "is a %s: write a list (lines starting with \"- \")", kindName(n))
	}
	for i, v := range n.Content {
		if err := f(i, v, fmt.Sprintf("%s[%d]", at, i)); err != nil {
			return err
		}
	}
	return nil
}

// ruleErr places a rule's validation error at its node.
func ruleErr(n *yaml.Node, field string, err error) error {
	msg := err.Error()
	// The rule's own words, without the sentinel's prefix.
	msg = strings.TrimPrefix(msg, ErrInvalidRule.Error()+" ")
	ce := errAt(n, field, "%s", msg)
	ce.err = err
	return ce
}
