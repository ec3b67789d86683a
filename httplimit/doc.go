// Package httplimit puts a sluice.Limiter in front of net/http handlers.
//
// New returns a middleware, func(http.Handler) http.Handler, so it wraps a
// ServeMux, a chi or gorilla router, or one handler. Each request that
// matches a Route (a ServeMux pattern) is checked against the route's rules
// (several are layered with Limiter.AllowAll: all or none) under its
// client's key:
//
//   - Who the client is: a KeyFunc. PeerIP keys by the connection's peer;
//     ClientIP reads Forwarded, X-Forwarded-For or X-Real-IP from trusted
//     proxies only, walking from the right and stopping at the first
//     untrusted hop; IPv6 addresses are grouped by /64 so that one host
//     cannot rotate through its addresses. Header, User, Composite, FirstOf
//     and Hashed cover API keys, authenticated users and combinations. A
//     request whose client cannot be named is answered (400 by default),
//     never counted under a shared key.
//   - The headers, each switchable (Config.OmitHeaders): the IETF httpapi
//     RateLimit-Policy and RateLimit fields (RFC 9651 structured fields,
//     draft-ietf-httpapi-ratelimit-headers), X-RateLimit-Limit,
//     X-RateLimit-Remaining, X-RateLimit-Reset and, on a denial,
//     Retry-After; each built per response from what is in force for the
//     key (its override tier, the rules as last reloaded).
//   - The denial: 429 with an RFC 9457 application/problem+json body
//     (Problem), or Config.Deny; a blocked client (a Deny rule or tier)
//     gets 403 without a Retry-After, or Config.OnBlocked.
//   - A check the limiter cannot make: Config.ErrorMode, which must be set.
//
// An admitted request costs the middleware two allocations with headers
// (one string holding every header value, one slice for them) and none
// without.
//
// grpclimit's interceptors check a route's rules and build its fields with
// the same code as the middleware, so that a gRPC client is told what an
// HTTP client is, field for field.
package httplimit
