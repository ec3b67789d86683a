package layer

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// FieldSet is a set of the rate-limit fields an answer carries; httplimit's
// Headers has the same bits.
type FieldSet uint8

// The fields, in httplimit.Headers' order and bits (see its constants for
// what each says).
const (
	// FieldPolicy is RateLimit-Policy.
	FieldPolicy FieldSet = 1 << iota
	// FieldRateLimit is RateLimit.
	FieldRateLimit
	// FieldXRateLimit is the legacy trio X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset.
	FieldXRateLimit
	// FieldRetryAfter is Retry-After.
	FieldRetryAfter

	// AllFields is every field.
	AllFields = FieldPolicy | FieldRateLimit | FieldXRateLimit | FieldRetryAfter
)

// ShadowParam marks a shadow rule (policy.Rule.Shadow): in
// RateLimit-Policy, a rule that is not enforced; in RateLimit, a rule that
// would have denied the request it let through. SoftParam marks, in
// RateLimit, an admission in the rule's soft band (policy.Rule.Soft): past
// Limit, to be denied once the band is used up. Vendor parameters, as the
// draft asks of parameters it does not define.
const (
	ShadowParam = "sluice-shadow"
	SoftParam   = "sluice-soft"
)

// maxSFInteger is the largest sf-integer (RFC 9651 §3.3.1: 15 digits).
const maxSFInteger = 999_999_999_999_999

// Seconds rounds d up to whole seconds, at least min.
func Seconds(d time.Duration, min int64) int64 {
	s := int64(math.Ceil(d.Seconds()))
	if s < min {
		s = min
	}
	return s
}

// SFInt clamps n to an sf-integer ≥ 0. The parameters q, w, r and t are
// sf-integers: RFC 9651 §4.1.4 serializes one as its decimal digits, which
// is what strconv.AppendInt writes for a value in range. Only the numbers
// and the flags are written per check; the names were serialized by
// httpsfv in ruleHeader.
func SFInt(n int64) int64 {
	return min(max(n, 0), maxSFInteger)
}

// NumFields is the number of fields: RateLimit-Policy, RateLimit,
// X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset (a Unix time
// in seconds) and Retry-After (in whole seconds), in the order of
// FieldNames and of Values.Field.
const NumFields = 6

// FieldNames are the canonical header names (http.CanonicalHeaderKey) of
// the fields, in the order of Values.Field: HTTP (httplimit) sends each
// under its name.
var FieldNames = [NumFields]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After"}

// MetadataNames are FieldNames in lower case: gRPC (grpclimit) sends each
// field as header metadata under its name.
var MetadataNames = func() (names [NumFields]string) {
	for i, name := range FieldNames {
		names[i] = strings.ToLower(name)
	}
	return names
}()

// Values is the fields of an answer in one string, as RuleSet.Check builds
// them: field i is s[ends[i-1]:ends[i]] (from 0 for the first), and is not
// sent if empty. RateLimit-Policy and RateLimit hold one item per rule that
// limits the key; the legacy trio is the enforcing rule's that binds the
// check (none if no enforcing rule limits it); Retry-After is set on a
// denial a retry can lift (not a blocked client's).
type Values struct {
	s    string
	ends [NumFields]int32
}

// Field returns the value of field i, "" if it is not sent.
func (v *Values) Field(i int) string {
	start := int32(0)
	if i > 0 {
		start = v.ends[i-1]
	}
	return v.s[start:v.ends[i]]
}

// Count returns the number of fields sent.
func (v *Values) Count() int {
	n, start := 0, int32(0)
	for _, end := range v.ends {
		if end > start {
			n++
		}
		start = end
	}
	return n
}

// item is one rule's state for an answer.
type item struct {
	rh        *ruleHeaders
	limit     int64         // in force for the key; 0: no limit on it (no item)
	window    time.Duration // in force
	remaining int64
	reset     time.Duration
	shadowed  bool // a shadow rule that would have denied
	soft      bool // admitted in the soft band
}

// fields builds the values of the rate-limit fields in set, in one string
// (one allocation, none without a field): RateLimit-Policy and RateLimit
// with one item per limited rule in items, the legacy trio from
// items[bind] (none if bind < 0; the only read of the clock), and
// Retry-After from d, the check's decision, on a denial that a retry can
// lift.
func fields(set FieldSet, items []item, bind int, d sluice.Decision) Values {
	if set&AllFields == 0 {
		return Values{}
	}
	var buf [224]byte
	b := buf[:0]
	var ends [NumFields]int32
	if set&FieldPolicy != 0 {
		start := len(b)
		for _, it := range items {
			if it.limit <= 0 {
				continue
			}
			if len(b) > start {
				b = append(b, ", "...)
			}
			b = append(b, it.rh.policyPrefix...)
			b = strconv.AppendInt(b, SFInt(it.limit), 10)
			if it.window%time.Second == 0 {
				b = append(b, ";w="...)
				b = strconv.AppendInt(b, SFInt(int64(it.window/time.Second)), 10)
			}
			if it.rh.shadow {
				b = append(b, ";"+ShadowParam...)
			}
		}
	}
	ends[0] = int32(len(b))
	if set&FieldRateLimit != 0 {
		start := len(b)
		for _, it := range items {
			if it.limit <= 0 {
				continue
			}
			if len(b) > start {
				b = append(b, ", "...)
			}
			b = append(b, it.rh.rateLimitPrefix...)
			b = strconv.AppendInt(b, SFInt(it.remaining), 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, SFInt(Seconds(it.reset, 0)), 10)
			if it.shadowed {
				b = append(b, ";"+ShadowParam...)
			}
			if it.soft {
				b = append(b, ";"+SoftParam...)
			}
		}
	}
	ends[1] = int32(len(b))
	if set&FieldXRateLimit != 0 && bind >= 0 {
		it := &items[bind]
		b = strconv.AppendInt(b, it.limit, 10)
		ends[2] = int32(len(b))
		b = strconv.AppendInt(b, max(it.remaining, 0), 10)
		ends[3] = int32(len(b))
		b = strconv.AppendInt(b, time.Now().Add(it.reset+time.Second-1).Unix(), 10)
	} else {
		ends[2], ends[3] = ends[1], ends[1]
	}
	ends[4] = int32(len(b))
	if !d.Allowed && !d.Blocked() && set&FieldRetryAfter != 0 {
		b = strconv.AppendInt(b, Seconds(d.RetryAfter, 1), 10)
	}
	ends[5] = int32(len(b))
	if len(b) == 0 {
		return Values{}
	}
	return Values{s: string(b), ends: ends}
}
