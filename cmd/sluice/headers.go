package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// headerSet is which response headers serve asks envoy to add (-headers).
type headerSet struct {
	ietf bool // RateLimit and RateLimit-Policy
	x    bool // X-RateLimit-Limit, -Remaining, -Reset
}

// parseHeaders reads -headers: a comma-separated list of "ratelimit" and
// "x-ratelimit", or "none".
func parseHeaders(s string) (headerSet, error) {
	var h headerSet
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(f) {
		case "", "none":
		case "ratelimit":
			h.ietf = true
		case "x-ratelimit":
			h.x = true
		default:
			return h, fmt.Errorf("-headers %q: %q is not a header set: use ratelimit, x-ratelimit or both, comma-separated (or none)", s, f)
		}
	}
	return h, nil
}

// decided is one descriptor's decision, for the headers.
type decided struct {
	rule   string
	d      sluice.Decision
	shadow bool
}

// headers are the response headers for the request's decisions (those
// with a limit, in descriptor order):
//
//   - RateLimit-Policy: one item per rule, `"name";q=Limit;w=Window`, and
//     RateLimit: one per descriptor, `"name";r=Remaining;t=Reset`, as
//     httplimit builds them (IETF draft-ietf-httpapi-ratelimit-headers).
//   - X-RateLimit-Limit, -Remaining and -Reset of the descriptor that binds
//     the request: the first over its limit, else the one with the least
//     remaining (never a shadow_mode limit); Reset is in seconds from now,
//     as envoyproxy/ratelimit sends it.
func (h headerSet) headers(ds []decided, rules map[string]policy.Rule) []*corev3.HeaderValue {
	if len(ds) == 0 || !h.ietf && !h.x {
		return nil
	}
	var out []*corev3.HeaderValue
	add := func(k, v string) { out = append(out, &corev3.HeaderValue{Key: k, Value: v}) }
	if h.ietf {
		var prs []policy.Rule
		var items []string
		seen := map[string]bool{}
		for _, x := range ds {
			if pr, ok := rules[x.rule]; ok && !seen[x.rule] {
				seen[x.rule] = true
				prs = append(prs, pr)
			}
			if v, err := httplimit.RateLimitField(x.rule, x.d); err == nil {
				items = append(items, v)
			}
		}
		if v, err := httplimit.PolicyField(prs...); err == nil && len(prs) > 0 {
			add("RateLimit-Policy", v)
		}
		if len(items) > 0 {
			add("RateLimit", strings.Join(items, ", "))
		}
	}
	if h.x {
		bind := -1
		for i, x := range ds {
			if x.shadow {
				continue
			}
			if !x.d.Allowed {
				bind = i
				break
			}
			if bind < 0 || x.d.Remaining < ds[bind].d.Remaining {
				bind = i
			}
		}
		if bind >= 0 {
			d := ds[bind].d
			add("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
			add("X-RateLimit-Remaining", strconv.FormatInt(max(d.Remaining, 0), 10))
			add("X-RateLimit-Reset", strconv.FormatInt(int64(math.Ceil(d.ResetAfter.Seconds())), 10))
		}
	}
	return out
}
