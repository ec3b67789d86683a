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
// default.
const (
	// HeaderRateLimitPolicy is the IETF RateLimit-Policy field: one item per
	// rule of the route, `"name";q=Limit;w=Window-in-seconds` (w only for a
	// window of whole seconds; the parameter sluice-shadow for a shadow
	// rule, which is not enforced).
	HeaderRateLimitPolicy Headers = 1 << iota
	// HeaderRateLimit is the IETF RateLimit field: `"name";r=Remaining;t=Reset`
	// for each rule of the route (with the parameter sluice-shadow when a
	// shadow rule would have denied the request).
	HeaderRateLimit
	// HeaderXRateLimit is the legacy trio X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (a Unix time in seconds),
	// for the rule that decided the request.
	HeaderXRateLimit
	// HeaderRetryAfter is Retry-After on a denial, in whole seconds.
	HeaderRetryAfter
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
// would have denied the request it let through. A vendor parameter, as the
// draft asks of parameters it does not define.
const shadowParam = "sluice-shadow"

// maxSFInteger is the largest sf-integer (RFC 9651 §3.3.1: 15 digits).
const maxSFInteger = 999_999_999_999_999

// ruleHeaders holds what the headers say about one rule that never changes:
// its RateLimit item up to the remaining count, its limit as text.
type ruleHeaders struct {
	shadow          bool     // policy.Rule.Shadow: a dry run
	rateLimitPrefix string   // `"name";r=`
	limit           []string // X-RateLimit-Limit, shared by every response
}

// policyItem returns the RateLimit-Policy item of a rule.
func policyItem(pr policy.Rule) httpsfv.Item {
	it := httpsfv.NewItem(pr.Name)
	it.Params.Add("q", pr.Limit)
	if pr.Window%time.Second == 0 {
		it.Params.Add("w", int64(pr.Window/time.Second))
	}
	if pr.Shadow {
		it.Params.Add(shadowParam, true)
	}
	return it
}

// staticHeaders serializes, once per route, the RateLimit-Policy value and
// each rule's fixed parts, with httpsfv: the policy name is an sf-string,
// so any rule name is written correctly.
func staticHeaders(rules []policy.Rule) (policyValue []string, per []ruleHeaders, err error) {
	for _, pr := range rules {
		name, err := httpsfv.Marshal(httpsfv.NewItem(pr.Name))
		if err != nil {
			return nil, nil, fmt.Errorf("httplimit: rule %q: %w", pr.Name, err)
		}
		per = append(per, ruleHeaders{shadow: pr.Shadow, rateLimitPrefix: name + ";r=", limit: []string{strconv.FormatInt(pr.Limit, 10)}})
	}
	v, err := PolicyField(rules...)
	if err != nil {
		return nil, nil, err
	}
	return []string{v}, per, nil
}

// seconds rounds d up to whole seconds, at least min.
func seconds(d time.Duration, min int64) int64 {
	s := int64(math.Ceil(d.Seconds()))
	if s < min {
		s = min
	}
	return s
}

// sfInt clamps n to an sf-integer ≥ 0. The parameters r and t are
// sf-integers: RFC 9651 §4.1.4 serializes one as its decimal digits, which
// is what strconv.AppendInt writes for a value in range. Only these two
// numbers are written per request; everything else of the field was
// serialized by httpsfv in staticHeaders.
func sfInt(n int64) int64 {
	return min(max(n, 0), maxSFInteger)
}

// item is one rule's state for the RateLimit field.
type item struct {
	rh        *ruleHeaders
	remaining int64
	reset     time.Duration
	shadowed  bool // a shadow rule that would have denied
}

// setDynamic sets the headers that change with each decision, in one
// string and one []string for all of them (two allocations per response):
// RateLimit with one item per rule in items, and the legacy headers and
// Retry-After from d, the decision of the rule bind.
func setDynamic(h http.Header, set Headers, items []item, bind *ruleHeaders, d sluice.Decision, now time.Time) {
	var buf [192]byte
	b := buf[:0]
	var ends [4]int
	var keys [4]string
	n := 0
	mark := func(k string) { keys[n], ends[n] = k, len(b); n++ }
	if set&HeaderRateLimit != 0 {
		for i, it := range items {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, it.rh.rateLimitPrefix...)
			b = strconv.AppendInt(b, sfInt(it.remaining), 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, sfInt(seconds(it.reset, 0)), 10)
			if it.shadowed {
				b = append(b, ";"+shadowParam...)
			}
		}
		mark(hRateLimit)
	}
	if set&HeaderXRateLimit != 0 {
		b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
		mark(hXRemaining)
		b = strconv.AppendInt(b, now.Add(d.ResetAfter+time.Second-1).Unix(), 10)
		mark(hXReset)
	}
	if !d.Allowed && set&HeaderRetryAfter != 0 {
		b = strconv.AppendInt(b, seconds(d.RetryAfter, 1), 10)
		mark(hRetryAfter)
	}
	if n == 0 {
		return
	}
	s := string(b)
	vals := make([]string, n)
	start := 0
	for i := range n {
		vals[i] = s[start:ends[i]]
		start = ends[i]
		h[keys[i]] = vals[i : i+1 : i+1]
	}
	if set&HeaderXRateLimit != 0 {
		h[hXLimit] = bind.limit
	}
}
