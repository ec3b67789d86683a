package httplimit

import (
	"net/netip"
	"strings"
)

// maxHops is how many of the rightmost hops of a forwarding header are
// kept: the walk from the right stops at the first untrusted hop, so only
// as many hops as there are trusted proxies in a row matter.
const maxHops = 32

// hops holds the rightmost maxHops hops of a forwarding header, in a ring,
// without allocating. An invalid hop (unparseable, "unknown", obfuscated)
// has an invalid Addr.
type hops struct {
	ring [maxHops]netip.Addr
	n    int // hops seen in all
}

func (h *hops) add(a netip.Addr) {
	h.ring[h.n%maxHops] = a
	h.n++
}

// fromRight returns the i-th hop from the right (0 is the last one) and
// whether it is still held.
func (h *hops) fromRight(i int) (netip.Addr, bool) {
	if i >= h.n || i >= maxHops {
		return netip.Addr{}, false
	}
	return h.ring[(h.n-1-i)%maxHops], true
}

// parseNode parses a hop's node as forwarding headers write it: an IPv4
// address, an IPv6 address bare or in brackets, either with a port. It
// returns the address unmapped and without zone, or an invalid Addr for
// anything else ("unknown", an obfuscated identifier, garbage).
func parseNode(s string) netip.Addr {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return canonical(a)
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return canonical(ap.Addr())
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return canonical(a)
		}
	}
	return netip.Addr{}
}

// canonical unmaps an IPv4-mapped IPv6 address and drops any zone, so one
// client has one address.
func canonical(a netip.Addr) netip.Addr {
	return a.Unmap().WithZone("")
}

// parseXFF reads X-Forwarded-For values (comma-separated addresses, the
// client first, each proxy appending the address it received from; several
// header lines are one list, in order) into h.
func parseXFF(values []string, h *hops) {
	for _, v := range values {
		for len(v) > 0 {
			elem := v
			if i := strings.IndexByte(v, ','); i >= 0 {
				elem, v = v[:i], v[i+1:]
			} else {
				v = ""
			}
			if strings.TrimSpace(elem) == "" {
				continue // empty list elements are allowed and mean nothing
			}
			h.add(parseNode(elem))
		}
	}
}

// parseForwarded reads Forwarded values (RFC 7239: comma-separated
// elements, one per hop, each a ';'-separated list of name=value pairs whose
// values are tokens or quoted strings) into h: the node of each element's
// "for" pair, an invalid Addr for an element without one. A value that does
// not follow the grammar (an unterminated quoted string) ends the walk with
// an invalid hop: what lies to its left cannot be attributed.
func parseForwarded(values []string, h *hops) {
	for _, v := range values {
		var forNode string
		hasFor, inElem := false, false
		i := 0
		for i <= len(v) {
			if i == len(v) || v[i] == ',' {
				if inElem {
					if hasFor {
						h.add(parseNode(forNode))
					} else {
						h.add(netip.Addr{})
					}
				}
				forNode, hasFor, inElem = "", false, false
				i++
				continue
			}
			if v[i] == ' ' || v[i] == '\t' || v[i] == ';' {
				i++
				continue
			}
			// A pair: name "=" (token / quoted-string).
			inElem = true
			eq := i
			for eq < len(v) && v[eq] != '=' && v[eq] != ';' && v[eq] != ',' {
				eq++
			}
			if eq == len(v) || v[eq] != '=' {
				h.add(netip.Addr{}) // a pair without a value: not the grammar
				return
			}
			name := strings.TrimSpace(v[i:eq])
			j := eq + 1
			var val string
			if j < len(v) && v[j] == '"' {
				unq, end, ok := quoted(v, j)
				if !ok {
					h.add(netip.Addr{})
					return
				}
				val, j = unq, end
			} else {
				k := j
				for k < len(v) && v[k] != ';' && v[k] != ',' {
					k++
				}
				val, j = strings.TrimSpace(v[j:k]), k
			}
			if strings.EqualFold(name, "for") {
				if hasFor { // two "for" pairs in one element: ambiguous
					forNode = ""
				} else {
					forNode = val
				}
				hasFor = true
			}
			i = j
		}
	}
}

// quoted returns the content of the quoted string that starts at s[i] (a
// '"'), the index just past it, and whether it is terminated. A quoted pair
// (backslash and a character) stands for the character; a node never
// contains one, so the content is returned as it stands and such a node is
// simply invalid.
func quoted(s string, i int) (string, int, bool) {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			return s[i+1 : j], j + 1, true
		}
	}
	return "", len(s), false
}
