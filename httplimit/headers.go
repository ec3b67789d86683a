package httplimit

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// Headers is a set of the response headers the middleware can send.
type Headers uint8

// The headers. Config.OmitHeaders switches them off; all are sent by
// default. Each is built for every response from what is in force for the
// request's keys: an override tier's limit, and the rules as the last
// SetRules or WatchFile reload left them.
const (
	// HeaderRateLimitPolicy is the IETF RateLimit-Policy field: one item per
	// limited rule of the route, `"name";q=Limit;w=Window-in-seconds`, the
	// Limit in force for the key (its tier's) and w only for a window of
	// whole seconds; the parameter sluice-shadow for a shadow rule, which is
	// not enforced. A rule that puts no limit on the key (an Unlimited or a
	// Deny tier) has no item; a response with no item has no field.
	HeaderRateLimitPolicy Headers = 1 << iota
	// HeaderRateLimit is the IETF RateLimit field:
	// `"name";r=Remaining;t=Reset`, one item per limited rule of the route
	// (as RateLimit-Policy), with the parameter sluice-shadow when a shadow
	// rule would have denied the request, and sluice-soft when the request
	// was admitted past the rule's Limit, in its soft band.
	HeaderRateLimit
	// HeaderXRateLimit is the legacy trio X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (a Unix time in seconds),
	// for the enforcing rule that binds the request: the one that denied
	// it, else the enforcing rule with the least remaining. Never a shadow
	// rule, nor a rule that puts no limit on the key: a route without such
	// a rule sends no trio.
	HeaderXRateLimit
	// HeaderRetryAfter is Retry-After on a denial, in whole seconds. A
	// blocked client (a Deny rule or tier) is not told to retry.
	HeaderRetryAfter

	allHeaders = HeaderRateLimitPolicy | HeaderRateLimit | HeaderXRateLimit | HeaderRetryAfter
)

// Canonical header names (http.CanonicalHeaderKey of the field names).
const (
	hPolicy     = "Ratelimit-Policy"
	hRateLimit  = "Ratelimit"
	hXLimit     = "X-Ratelimit-Limit"
	hXRemaining = "X-Ratelimit-Remaining"
	hXReset     = "X-Ratelimit-Reset"
	hRetryAfter = "Retry-After"
)

// shadowParam marks a shadow rule (policy.Rule.Shadow): in
// RateLimit-Policy, a rule that is not enforced; in RateLimit, a rule that
// would have denied the request it let through. softParam marks, in
// RateLimit, an admission in the rule's soft band (policy.Rule.Soft): past
// Limit, to be denied once the band is used up. Vendor parameters, as the
// draft asks of parameters it does not define.
const (
	shadowParam = "sluice-shadow"
	softParam   = "sluice-soft"
)

// maxSFInteger is the largest sf-integer (RFC 9651 §3.3.1: 15 digits).
const maxSFInteger = 999_999_999_999_999

// ruleHeaders holds what the headers say about one rule that never changes:
// its name as an sf-string, in the prefixes of its items. Its limit and
// window are read for each response: tiers and reloads change them.
type ruleHeaders struct {
	name            string // the rule's name, for Limiter.Window
	shadow          bool   // policy.Rule.Shadow: a dry run
	policyPrefix    string // `"name";q=`
	rateLimitPrefix string // `"name";r=`
}

// policyItem returns the RateLimit-Policy item of a rule.
func policyItem(pr policy.Rule) httpsfv.Item {
	it := httpsfv.NewItem(pr.Name)
	it.Params.Add("q", pr.Limit)
	if w := pr.WindowLength(); w%time.Second == 0 {
		it.Params.Add("w", int64(w/time.Second))
	}
	if pr.Shadow {
		it.Params.Add(shadowParam, true)
	}
	return it
}

// ruleHeader serializes, once per route, a rule's fixed parts with
// httpsfv: the name is an sf-string, so any rule name is written
// correctly.
func ruleHeader(pr policy.Rule) (ruleHeaders, error) {
	name, err := httpsfv.Marshal(httpsfv.NewItem(pr.Name))
	if err != nil {
		return ruleHeaders{}, fmt.Errorf("httplimit: rule %q: %w", pr.Name, err)
	}
	return ruleHeaders{name: pr.Name, shadow: pr.Shadow, policyPrefix: name + ";q=", rateLimitPrefix: name + ";r="}, nil
}

// seconds rounds d up to whole seconds, at least min.
func seconds(d time.Duration, min int64) int64 {
	s := int64(math.Ceil(d.Seconds()))
	if s < min {
		s = min
	}
	return s
}

// sfInt clamps n to an sf-integer ≥ 0. The parameters q, w, r and t are
// sf-integers: RFC 9651 §4.1.4 serializes one as its decimal digits, which
// is what strconv.AppendInt writes for a value in range. Only the numbers
// and the flags are written per request; the names were serialized by
// httpsfv in ruleHeader.
func sfInt(n int64) int64 {
	return min(max(n, 0), maxSFInteger)
}

// item is one rule's state for a response.
type item struct {
	rh        *ruleHeaders
	limit     int64         // in force for the key; 0: no limit on it (no item)
	window    time.Duration // in force
	remaining int64
	reset     time.Duration
	shadowed  bool // a shadow rule that would have denied
	soft      bool // admitted in the soft band
}

// Fields are the values of the rate-limit fields of one answer, as
// RuleSet.Check builds them (Result.Fields); "" for a field not sent. HTTP
// sends each under its name; gRPC (grpclimit) as header metadata, under
// its name in lower case. All the values of an answer share one string.
type Fields struct {
	// Policy is RateLimit-Policy: one item per rule that limits the key.
	Policy string
	// RateLimit is RateLimit: one item per rule that limits the key.
	RateLimit string
	// Limit, Remaining and Reset are X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (a Unix time in seconds)
	// of the enforcing rule that binds the check; none for a check no
	// enforcing rule limits.
	Limit, Remaining, Reset string
	// RetryAfter is Retry-After, in whole seconds: on a denial a retry can
	// lift (not a blocked client's).
	RetryAfter string
}

// numFields is the number of fields, in the order of Fields and of
// fieldKeys.
const numFields = 6

// fieldKeys are the header names of the fields, in the order of Fields.
var fieldKeys = [numFields]string{hPolicy, hRateLimit, hXLimit, hXRemaining, hXReset, hRetryAfter}

// values is the fields of an answer in one string: field i is
// s[ends[i-1]:ends[i]] (from 0 for the first), and is not sent if empty.
type values struct {
	s    string
	ends [numFields]int32
}

// field returns the value of field i, "" if it is not sent.
func (v *values) field(i int) string {
	start := int32(0)
	if i > 0 {
		start = v.ends[i-1]
	}
	return v.s[start:v.ends[i]]
}

// fields builds the values of the rate-limit fields in set, in one string
// (one allocation, none without a field): RateLimit-Policy and RateLimit
// with one item per limited rule in items, the legacy trio from
// items[bind] (none if bind < 0; the only read of the clock), and
// Retry-After from d, the check's decision, on a denial that a retry can
// lift.
func fields(set Headers, items []item, bind int, d sluice.Decision) values {
	if set&allHeaders == 0 {
		return values{}
	}
	var buf [224]byte
	b := buf[:0]
	var ends [numFields]int32
	if set&HeaderRateLimitPolicy != 0 {
		start := len(b)
		for _, it := range items {
			if it.limit <= 0 {
				continue
			}
			if len(b) > start {
				b = append(b, ", "...)
			}
			b = append(b, it.rh.policyPrefix...)
			b = strconv.AppendInt(b, sfInt(it.limit), 10)
			if it.window%time.Second == 0 {
				b = append(b, ";w="...)
				b = strconv.AppendInt(b, sfInt(int64(it.window/time.Second)), 10)
			}
			if it.rh.shadow {
				b = append(b, ";"+shadowParam...)
			}
		}
	}
	ends[0] = int32(len(b))
	if set&HeaderRateLimit != 0 {
		start := len(b)
		for _, it := range items {
			if it.limit <= 0 {
				continue
			}
			if len(b) > start {
				b = append(b, ", "...)
			}
			b = append(b, it.rh.rateLimitPrefix...)
			b = strconv.AppendInt(b, sfInt(it.remaining), 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, sfInt(seconds(it.reset, 0)), 10)
			if it.shadowed {
				b = append(b, ";"+shadowParam...)
			}
			if it.soft {
				b = append(b, ";"+softParam...)
			}
		}
	}
	ends[1] = int32(len(b))
	if set&HeaderXRateLimit != 0 && bind >= 0 {
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
	if !d.Allowed && !d.Blocked() && set&HeaderRetryAfter != 0 {
		b = strconv.AppendInt(b, seconds(d.RetryAfter, 1), 10)
	}
	ends[5] = int32(len(b))
	if len(b) == 0 {
		return values{}
	}
	return values{s: string(b), ends: ends}
}

// setHeaders sets the response's rate-limit headers from v, all of them in
// one []string (one allocation, none without a field).
func setHeaders(h http.Header, v *values) {
	if len(v.s) == 0 {
		return
	}
	n, start := 0, int32(0)
	for _, end := range v.ends {
		if end > start {
			n++
		}
		start = end
	}
	all := make([]string, n)
	n, start = 0, 0
	for i, end := range v.ends {
		if end > start {
			all[n] = v.s[start:end]
			h[fieldKeys[i]] = all[n : n+1 : n+1]
			n++
		}
		start = end
	}
}
