package policy

import "strings"

// node is one level of an envoy descriptor tree, as Match walks it.
type node struct {
	key     string             // the descriptor's key
	exact   map[entryKey]*node // key and value
	deflt   map[string]*node   // key only: any value
	wild    []wildcard         // key_value patterns ending in '*', in file order
	rule    string             // the rule of this descriptor's limit; "" if none or unlimited
	limited bool               // the descriptor has a rate_limit (perhaps unlimited)
}

type entryKey struct{ key, value string }

// wildcard is a descriptor whose key_value ends in '*': it matches an
// entry whose key_value starts with pattern (envoy compares the joined
// string).
type wildcard struct {
	pattern, full string
	n             *node
}

func newNode() *node {
	return &node{exact: map[entryKey]*node{}, deflt: map[string]*node{}}
}

// Match resolves one request's descriptor, a list of entries, to the rule
// and key that envoy ratelimit would choose; ok is false when no limit
// applies (no descriptor matches all the entries, the match has no
// rate_limit, or it is unlimited).
//
// The walk is envoy's: at each level an entry matches the descriptor with
// its key and value, else the first (in file order) whose key_value ends
// in '*' and prefixes the entry's key_value, else the descriptor with its
// key and no value (the default for any value). The limit applies only if
// the descriptor matched by the last entry has one: a request with more
// entries than the tree is deep, or fewer than the limited descriptor's
// depth, gets none.
//
// The key counts what envoy counts apart: the values of the entries that
// matched a default or a wildcard (an exact match adds nothing: the rule
// already says it). With one such value the key is the value itself; with
// several they are joined with '/', each with '\' and '/' escaped by '\',
// so distinct descriptors never share a key. The limiter stores keys
// encoded, so no value can change the Redis key layout.
//
// For sluice's format a descriptor is one entry whose Key is a rule name
// and whose Value the key: Match returns them if the rule exists.
func (c Config) Match(entries ...Entry) (rule, key string, ok bool) {
	if c.root == nil { // a Config built in Go, not loaded
		if len(entries) == 1 {
			for i := range c.Rules {
				if c.Rules[i].Name == entries[0].Key {
					return c.Rules[i].Name, entries[0].Value, true
				}
			}
		}
		return "", "", false
	}
	n := c.root
	if len(entries) == 0 {
		return "", "", false
	}
	var first string // the first variable value
	var mask uint32  // the variable entries (the tree is at most MaxDescriptorDepth deep)
	vars := 0
	for i, e := range entries {
		next := n.exact[entryKey{e.Key, e.Value}]
		variable := next == nil
		if next == nil {
			for _, w := range n.wild {
				if joinedHasPrefix(e.Key, e.Value, w.pattern) {
					next = w.n
					break
				}
			}
		}
		if next == nil {
			next = n.deflt[e.Key]
		}
		if next == nil {
			return "", "", false
		}
		if variable {
			if vars == 0 {
				first = e.Value
			}
			vars++
			mask |= 1 << i
		}
		if i == len(entries)-1 {
			if next.rule == "" {
				return "", "", false
			}
			if vars <= 1 {
				return next.rule, first, true
			}
			return next.rule, joinVariable(entries, mask), true
		}
		n = next
	}
	return "", "", false
}

// joinVariable joins the values of the entries in mask, each escaped.
func joinVariable(entries []Entry, mask uint32) string {
	var b strings.Builder
	n := 0
	for i, e := range entries {
		if mask&(1<<i) == 0 {
			continue
		}
		if n++; n > 1 {
			b.WriteByte('/')
		}
		escapeValue(&b, e.Value)
	}
	return b.String()
}

// escapeValue escapes '\' and '/' with '\'.
func escapeValue(b *strings.Builder, v string) {
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' || v[i] == '/' {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
}

// joinedHasPrefix reports whether key + "_" + value starts with p, without
// building the string.
func joinedHasPrefix(key, value, p string) bool {
	if len(p) <= len(key) {
		return strings.HasPrefix(key, p)
	}
	if !strings.HasPrefix(p, key) || p[len(key)] != '_' {
		return false
	}
	return strings.HasPrefix(value, p[len(key)+1:])
}
