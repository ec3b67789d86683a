// Package keyname holds the layout of sluice's Redis keys that the syncer,
// the limiter's in-flight rules and the command-line tools share: a limiter
// key percent-encoded (Encode) and what follows a rule's hash tag (Suffix).
package keyname

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// Encode appends key to dst so that it can sit inside a Redis key without
// changing its structure: bytes other than ASCII letters, digits and
// "-._~@+=/,;!*'()$&|^[]<>#?" become %XX. The encoding is injective ('%'
// itself is always encoded), so two keys never share a Redis key, and the
// result holds no '{', '}', ':', whitespace, control byte or non-ASCII byte.
func Encode(dst []byte, key string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(key); i++ {
		c := key[i]
		if safe[c] {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hex[c>>4], hex[c&15])
	}
	return dst
}

var safe = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~@+=/,;!*'()$&|^[]<>#?" {
		t[c] = true
	}
	return t
}()

// Suffix returns what follows the hash tag in the Redis keys of a rule
// of geometry geo (see syncer's keyName): ":<sub-window µs>", or for a calendar
// quota ":<period>@<zone>", the period named by periodNames (the calendar,
// not a length, keeps a rule whose geometry changed from mixing buckets).
func Suffix(geo window.Sliding) string {
	if p, loc := geo.Period(); p != 0 {
		return ":" + periodName(p) + "@" + loc.String()
	}
	return ":" + strconv.FormatInt(geo.Sub()/int64(time.Microsecond), 10)
}

// periodNames names each calendar period in Redis keys. It is keyname's own
// table, not policy.Period's String (made for policy files), so that no
// change to policy's text can move a rule's keys: these names are stored
// data and never change.
var periodNames = [...]string{
	policy.Day:   "day",
	policy.Week:  "week",
	policy.Month: "month",
}

// periodName returns p's name in Redis keys; a period the table lacks (none
// today) gets its number, which still never mixes with another's keys.
func periodName(p policy.Period) string {
	if int(p) < len(periodNames) && periodNames[p] != "" {
		return periodNames[p]
	}
	return "period" + strconv.Itoa(int(p))
}

// Tag returns the start of the Redis keys of the rule named rule,
// "<prefix>:{<rule>:", which an encoded limiter key, "}" and the rule's
// kind (Suffix, GCRA, Log) complete. The braces make "<rule>:<key>" a
// Redis Cluster hash tag: everything of one limiter key lives in one slot.
func Tag(prefix, rule string) string {
	return prefix + ":{" + rule + ":"
}

// GCRA returns what follows the hash tag in the Redis key of a Strict or
// Eventual GCRA or TokenBucket rule: ":gcra:<interval ns>:<burst>".
func GCRA(interval, burst int64) string {
	return ":gcra:" + strconv.FormatInt(interval, 10) + ":" + strconv.FormatInt(burst, 10)
}

// Log returns what follows the hash tag in the Redis key of a Strict
// SlidingLog rule: ":log:<window µs>".
func Log(windowUs int64) string {
	return ":log:" + strconv.FormatInt(windowUs, 10)
}

// Window returns the Redis key of the bucket counts of key under the window
// rule named rule, of geometry geo: "<prefix>:{<rule>:<key>}" and Suffix(geo),
// the key percent-encoded (Encode). The syncer builds the same key in its
// own buffer.
func Window(prefix, rule, key string, geo window.Sliding) string {
	return string(Encode([]byte(Tag(prefix, rule)), key)) + "}" + Suffix(geo)
}

// InFlightTag returns the start of the Redis keys of the in-flight rule
// named rule, "<prefix>:inflight:{<rule>:", which an encoded key and "}"
// complete (InFlight).
func InFlightTag(prefix, rule string) string {
	return prefix + ":inflight:{" + rule + ":"
}

// InFlight returns the Redis key of the sorted set of key's slot leases
// under the in-flight rule named rule: InFlightTag, the key percent-encoded,
// and "}".
func InFlight(prefix, rule, key string) string {
	return string(Encode([]byte(InFlightTag(prefix, rule)), key)) + "}"
}
