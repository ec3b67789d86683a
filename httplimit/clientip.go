package httplimit

import (
	"cmp"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// The forwarding headers ClientIP can read from trusted proxies.
const (
	// Forwarded is the standard header (RFC 7239): for=client, one element
	// per hop.
	Forwarded = "Forwarded"
	// XForwardedFor is the de facto header: a comma-separated list of
	// addresses, the client first, each proxy appending its peer.
	XForwardedFor = "X-Forwarded-For"
	// XRealIP is a single address set by the proxy in front (nginx's
	// realip module and others).
	XRealIP = "X-Real-IP"
)

// The header names as http.Header keys them.
var (
	canonicalXRealIP = http.CanonicalHeaderKey(XRealIP)
	canonicalXFF     = http.CanonicalHeaderKey(XForwardedFor)
)

// DefaultIPv6Prefix is the IPv6 prefix length ClientIP groups addresses by
// when IPv6Prefix is 0: a /64 is one subnet, usually one host or one
// customer, which can pick any of its 2^64 addresses at will.
const DefaultIPv6Prefix = 64

// ClientIP says how to find a request's client IP address, and how to group
// addresses into keys.
//
// The zero value keys by the peer address of the connection (RemoteAddr),
// IPv6 by its /64. Behind a load balancer or reverse proxy the peer is the
// proxy: list the proxies' addresses in TrustedProxies and name the header
// they set. The header is read only on requests whose peer is a trusted
// proxy, and walked from the right (the hop the nearest proxy appended)
// leftwards, past trusted proxies only: the first untrusted hop is the
// client. Whatever a client writes in the header itself lies to the left of
// that hop and is never read, so a client cannot choose its key.
//
// Name only the header your proxies set or overwrite: a header they pass on
// untouched comes from the client whole.
type ClientIP struct {
	// TrustedProxies are the addresses of your proxies (load balancers,
	// CDN edges, ingress controllers). Empty: the peer is the client.
	TrustedProxies []netip.Prefix
	// Header is the forwarding header the trusted proxies set: Forwarded,
	// XForwardedFor or XRealIP. Empty: none is read.
	Header string
	// IPv6Prefix is the prefix length IPv6 addresses are grouped by: every
	// address in one prefix shares one key. 0 means DefaultIPv6Prefix; 128
	// keys each address on its own.
	IPv6Prefix int
	// IPv4Prefix is the prefix length IPv4 addresses are grouped by. 0 means
	// 32, each address on its own.
	IPv4Prefix int
	// AllowBroadIdentity accepts the settings that Key and Addr otherwise
	// refuse because they hand identity to the clients or put a large part
	// of the internet under one key: a TrustedProxies prefix shorter than
	// /8 (IPv4) or /16 (IPv6), such as 0.0.0.0/0 or ::/0 (nearly every peer
	// is then a trusted proxy, so nearly every client writes its own key
	// into the header); an IPv4Prefix below 16 or an IPv6Prefix below 32
	// (one key for tens of thousands of IPv4 addresses, or for what
	// regional registries hand out to whole providers). Set it only for
	// such a network on purpose, such as a service reached only through a
	// private network whose every address is a proxy you run.
	AllowBroadIdentity bool
}

// The narrowest settings ClientIP accepts without AllowBroadIdentity.
const (
	// minTrustedIPv4Bits and minTrustedIPv6Bits bound a trusted proxy
	// range: a /8 (IPv4) or /16 (IPv6) is already a large network of one
	// operator; shorter ranges span operators.
	minTrustedIPv4Bits = 8
	minTrustedIPv6Bits = 16
	// minIPv4Prefix and minIPv6Prefix bound the grouping: a /16 is 65,536
	// IPv4 addresses; a /32 is the smallest allocation a registry makes
	// to a provider (which hands its customers a /48 to a /64).
	minIPv4Prefix = 16
	minIPv6Prefix = 32
)

// PeerIP returns a KeyFunc that keys a request by its peer address
// (RemoteAddr), IPv6 addresses grouped by their /64. It is ClientIP{}.Key.
// Use it when clients connect to the service directly.
func PeerIP() KeyFunc {
	fn, _ := ClientIP{}.Key() // the zero ClientIP is valid
	return fn
}

// Key checks c and returns a KeyFunc that keys a request by its client
// address, grouped by c's prefixes: the address ("192.0.2.1") when the
// prefix is the whole address, else the prefix ("2001:db8:1:2::/64"). A
// request whose client address cannot be found (a RemoteAddr that is not
// an address, as with a Unix socket; a trusted proxy's header that names no
// address) has no identity. The error says what is wrong with c: among
// others a trusted range or a grouping so broad that clients would pick
// their own keys or share one with much of the internet (see
// AllowBroadIdentity).
func (c ClientIP) Key() (KeyFunc, error) {
	r, err := c.resolver()
	if err != nil {
		return nil, err
	}
	return r.key, nil
}

// Addr checks c and returns the client address of req, not grouped.
func (c ClientIP) Addr(req *http.Request) (netip.Addr, error) {
	r, err := c.resolver()
	if err != nil {
		return netip.Addr{}, err
	}
	return r.addr(req)
}

// resolver is a checked ClientIP.
type resolver struct {
	trusted []netip.Prefix
	header  string // canonical; "" for none
	v6, v4  int
}

func (c ClientIP) resolver() (*resolver, error) {
	r := &resolver{v6: c.IPv6Prefix, v4: c.IPv4Prefix}
	if r.v6 == 0 {
		r.v6 = DefaultIPv6Prefix
	}
	if r.v4 == 0 {
		r.v4 = 32
	}
	if r.v6 < 1 || r.v6 > 128 {
		return nil, fmt.Errorf("httplimit: ClientIP.IPv6Prefix %d: use 1 to 128 (0 means %d)", c.IPv6Prefix, DefaultIPv6Prefix)
	}
	if r.v4 < 1 || r.v4 > 32 {
		return nil, fmt.Errorf("httplimit: ClientIP.IPv4Prefix %d: use 1 to 32 (0 means 32)", c.IPv4Prefix)
	}
	if !c.AllowBroadIdentity {
		if r.v6 < minIPv6Prefix {
			return nil, fmt.Errorf("httplimit: ClientIP.IPv6Prefix %d puts every IPv6 client of a /%d, a whole provider's network or more, under one key: use %d to 128 (0 means %d), or set AllowBroadIdentity if that is meant", c.IPv6Prefix, r.v6, minIPv6Prefix, DefaultIPv6Prefix)
		}
		if r.v4 < minIPv4Prefix {
			return nil, fmt.Errorf("httplimit: ClientIP.IPv4Prefix %d puts the %d IPv4 addresses of a /%d under one key: use %d to 32 (0 means 32), or set AllowBroadIdentity if that is meant", c.IPv4Prefix, uint64(1)<<(32-r.v4), r.v4, minIPv4Prefix)
		}
	}
	for _, p := range c.TrustedProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("httplimit: ClientIP.TrustedProxies holds an invalid prefix: build them with netip.MustParsePrefix")
		}
		least := minTrustedIPv4Bits
		if p.Addr().Is6() {
			least = minTrustedIPv6Bits
		}
		if p.Bits() < least && !c.AllowBroadIdentity {
			return nil, fmt.Errorf("httplimit: ClientIP.TrustedProxies holds %v: a range shorter than /%d trusts peers across the internet, each of which could then write its own key into %s; list your proxies' own addresses (or set AllowBroadIdentity if every address in it is a proxy you run)", p, least, cmp.Or(c.Header, "the forwarding header"))
		}
		r.trusted = append(r.trusted, p.Masked())
	}
	switch {
	case c.Header == "":
	case strings.EqualFold(c.Header, Forwarded), strings.EqualFold(c.Header, XForwardedFor), strings.EqualFold(c.Header, XRealIP):
		r.header = http.CanonicalHeaderKey(c.Header)
		if len(r.trusted) == 0 {
			return nil, fmt.Errorf("httplimit: ClientIP.Header %q without TrustedProxies: any client could set it; list your proxies' addresses", c.Header)
		}
	default:
		return nil, fmt.Errorf("httplimit: ClientIP.Header %q: use httplimit.Forwarded, XForwardedFor or XRealIP (the header your proxies set)", c.Header)
	}
	return r, nil
}

func (r *resolver) isTrusted(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// peer parses RemoteAddr ("ip:port", as net/http sets it; a bare address
// is accepted too).
func peer(remote string) (netip.Addr, string, error) {
	host := remote
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		a := ap.Addr()
		if i := strings.LastIndexByte(remote, ':'); i > 0 {
			host = strings.TrimSuffix(strings.TrimPrefix(remote[:i], "["), "]")
		}
		return canonical(a), host, nil
	}
	if a, err := netip.ParseAddr(remote); err == nil {
		return canonical(a), host, nil
	}
	return netip.Addr{}, "", fmt.Errorf("%w: RemoteAddr %q is not an address", ErrNoIdentity, truncate(remote))
}

// addr finds the client address of req.
func (r *resolver) addr(req *http.Request) (netip.Addr, error) {
	a, _, err := peer(req.RemoteAddr)
	if err != nil {
		return a, err
	}
	return r.behind(a, req.Header)
}

// behind returns the client behind peer a, reading the trusted header.
func (r *resolver) behind(a netip.Addr, h http.Header) (netip.Addr, error) {
	if r.header == "" || !r.isTrusted(a) {
		return a, nil
	}
	values := h[r.header]
	if len(values) == 0 {
		return a, nil // a trusted host speaking for itself (a health check)
	}
	if r.header == canonicalXRealIP {
		c := parseNode(values[len(values)-1])
		if !c.IsValid() {
			return c, fmt.Errorf("%w: trusted proxy %v sent X-Real-IP %q, not an address", ErrNoIdentity, a, truncate(values[len(values)-1]))
		}
		return c, nil
	}
	var hs hops
	if r.header == canonicalXFF {
		parseXFF(values, &hs)
	} else {
		parseForwarded(values, &hs)
	}
	client := a
	for i := 0; ; i++ {
		hop, ok := hs.fromRight(i)
		if !ok {
			if i < hs.n {
				return netip.Addr{}, fmt.Errorf("%w: more than %d trusted hops in %s", ErrNoIdentity, maxHops, r.header)
			}
			return client, nil // every hop trusted: the leftmost is the client
		}
		if !hop.IsValid() {
			return hop, fmt.Errorf("%w: %s names no address after trusted %v", ErrNoIdentity, r.header, client)
		}
		client = hop
		if !r.isTrusted(hop) {
			return client, nil
		}
	}
}

// key is the KeyFunc: the client address grouped by the prefixes. When the
// key is the peer's address exactly as RemoteAddr writes it, it is that
// part of RemoteAddr, without allocating.
func (r *resolver) key(req *http.Request) (string, error) {
	a, host, err := peer(req.RemoteAddr)
	if err != nil {
		return "", err
	}
	c, err := r.behind(a, req.Header)
	if err != nil {
		return "", err
	}
	bits := r.v4
	if c.Is6() {
		bits = r.v6
	}
	var buf [64]byte
	var b []byte
	if bits == c.BitLen() {
		b = c.AppendTo(buf[:0])
		if c == a && string(b) == host {
			return host, nil
		}
	} else {
		p, _ := c.Prefix(bits) // bits is within range for c's family
		b = p.AppendTo(buf[:0])
	}
	return string(b), nil
}

// truncate bounds user input quoted in an error message.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
