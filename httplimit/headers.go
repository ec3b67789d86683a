package httplimit

import (
	"net/http"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/sluicehq/sluice/internal/layer"
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
	HeaderRateLimitPolicy = Headers(layer.FieldPolicy)
	// HeaderRateLimit is the IETF RateLimit field:
	// `"name";r=Remaining;t=Reset`, one item per limited rule of the route
	// (as RateLimit-Policy), with the parameter sluice-shadow when a shadow
	// rule would have denied the request, and sluice-soft when the request
	// was admitted past the rule's Limit, in its soft band.
	HeaderRateLimit = Headers(layer.FieldRateLimit)
	// HeaderXRateLimit is the legacy trio X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (a Unix time in seconds),
	// for the enforcing rule that binds the request: the one that denied
	// it, else the enforcing rule with the least remaining. Never a shadow
	// rule, nor a rule that puts no limit on the key: a route without such
	// a rule sends no trio.
	HeaderXRateLimit = Headers(layer.FieldXRateLimit)
	// HeaderRetryAfter is Retry-After on a denial, in whole seconds. A
	// blocked client (a Deny rule or tier) is not told to retry.
	HeaderRetryAfter = Headers(layer.FieldRetryAfter)
)

// hRetryAfter is Retry-After's canonical header name.
const hRetryAfter = "Retry-After"

// policyItem returns the RateLimit-Policy item of a rule.
func policyItem(pr policy.Rule) httpsfv.Item {
	it := httpsfv.NewItem(pr.Name)
	it.Params.Add("q", pr.Limit)
	if w := pr.WindowLength(); w%time.Second == 0 {
		it.Params.Add("w", int64(w/time.Second))
	}
	if pr.Shadow {
		it.Params.Add(layer.ShadowParam, true)
	}
	return it
}

// setHeaders sets the response's rate-limit headers from v, all of them in
// one []string (one allocation, none without a field).
func setHeaders(h http.Header, v *layer.Values) {
	n := v.Count()
	if n == 0 {
		return
	}
	all := make([]string, n)
	n = 0
	for i := range layer.NumFields {
		if f := v.Field(i); f != "" {
			all[n] = f
			h[layer.FieldNames[i]] = all[n : n+1 : n+1]
			n++
		}
	}
}
