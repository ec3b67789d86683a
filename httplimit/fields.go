package httplimit

import (
	"fmt"

	"github.com/dunglas/httpsfv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/layer"
	"github.com/sluicehq/sluice/policy"
)

// PolicyField returns the value of the IETF RateLimit-Policy field that
// describes rules, one item per rule: `"api";q=100;w=60` (q the Limit, w
// the Window in seconds, only for a window of whole seconds). It is
// serialized by httpsfv, an RFC 9651 implementation. Pass the rules in
// force for the client: an override tier's rule (policy.Rule.Tier) has its
// own Limit, and a reload changes them (the middleware builds the field
// for every response). Other transports (grpclimit) send it as metadata.
func PolicyField(rules ...policy.Rule) (string, error) {
	list := make(httpsfv.List, 0, len(rules))
	for _, pr := range rules {
		list = append(list, policyItem(pr))
	}
	v, err := httpsfv.Marshal(list)
	if err != nil {
		return "", fmt.Errorf("httplimit: RateLimit-Policy: %w", err)
	}
	return v, nil
}

// RateLimitField returns the value of the IETF RateLimit field for the
// decision d of the rule named rule: `"api";r=42;t=18` (r the remaining
// units, t the seconds until the key's quota is whole again, sluice-shadow
// when a shadow rule would have denied, sluice-soft when the check was
// admitted in the rule's soft band), serialized by httpsfv. The middleware
// writes the same bytes without httpsfv's allocations.
func RateLimitField(rule string, d sluice.Decision) (string, error) {
	it := httpsfv.NewItem(rule)
	it.Params.Add("r", layer.SFInt(d.Remaining))
	it.Params.Add("t", layer.SFInt(layer.Seconds(d.ResetAfter, 0)))
	if d.Shadowed() {
		it.Params.Add(layer.ShadowParam, true)
	}
	if d.InSoftBand() {
		it.Params.Add(layer.SoftParam, true)
	}
	v, err := httpsfv.Marshal(httpsfv.List{it})
	if err != nil {
		return "", fmt.Errorf("httplimit: RateLimit: %w", err)
	}
	return v, nil
}
