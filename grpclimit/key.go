package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/keyfn"
)

// KeyFunc names the client of a call: the key it is limited under. It is
// the identity hook: any function of the call's context (its metadata,
// peer.FromContext for the peer address and its AuthInfo, such as the TLS
// client certificate, or what an earlier interceptor stored) and its full
// method name. It returns an error wrapping ErrNoIdentity, never an empty
// key, when it cannot tell; the call then fails with
// codes.Unauthenticated, and is never counted under a shared key.
//
// The ready key functions give each kind of identity its own key space, as
// httplimit's do: an IP address is its text ("192.0.2.1",
// "2001:db8::/64"), a metadata value starts with "m:", a user with "u:", a
// hash with "#", so a client cannot pass one kind of key off as another.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// ErrNoIdentity means a call does not say who its client is.
var ErrNoIdentity = errors.New("grpclimit: no client identity")

// PeerIP returns a KeyFunc that keys a call by its peer's IP address, IPv6
// addresses grouped by their /64 (one host can pick any address in it).
// Use it when clients connect to the service directly; behind a proxy, use
// ClientIP.
func PeerIP() KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: no peer", ErrNoIdentity)
		}
		var a netip.Addr
		switch pa := p.Addr.(type) {
		case *net.TCPAddr:
			a = pa.AddrPort().Addr()
		default:
			ap, err := netip.ParseAddrPort(p.Addr.String())
			if err != nil {
				return "", fmt.Errorf("%w: peer %q is not an IP address", ErrNoIdentity, p.Addr.String())
			}
			a = ap.Addr()
		}
		a = a.Unmap().WithZone("")
		if a.Is6() {
			pfx, _ := a.Prefix(httplimit.DefaultIPv6Prefix)
			return pfx.String(), nil
		}
		return a.String(), nil
	}
}

// ClientIP checks c and returns a KeyFunc that keys a call by its client's
// IP address as c finds it: the peer address, or, when the peer is one of
// c.TrustedProxies, the forwarding field c.Header (Forwarded,
// X-Forwarded-For or X-Real-IP) read from the call's metadata, where gRPC
// proxies put it (lower-cased, as gRPC keys metadata). The rules are
// httplimit.ClientIP's, the same code: the field is walked from the right,
// past trusted proxies only, and addresses are grouped by c's prefixes.
// It refuses what httplimit.ClientIP.Key refuses, with the reason: among
// others a trusted range covering much of the internet (0.0.0.0/0, ::/0)
// or a grouping that lumps many clients into one key, unless
// c.AllowBroadIdentity.
func ClientIP(c httplimit.ClientIP) (KeyFunc, error) {
	fn, err := c.Key()
	if err != nil {
		return nil, err
	}
	field := strings.ToLower(c.Header)
	canonical := http.CanonicalHeaderKey(c.Header)
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: no peer", ErrNoIdentity)
		}
		req := &http.Request{RemoteAddr: p.Addr.String(), Header: http.Header{}}
		if field != "" {
			if vs := metadata.ValueFromIncomingContext(ctx, field); len(vs) > 0 {
				req.Header[canonical] = vs
			}
		}
		k, err := fn(req)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrNoIdentity, err)
		}
		return k, nil
	}, nil
}

// Metadata returns a KeyFunc that keys a call by the first value of the
// request metadata key (an API key, a tenant): "m:" and the value. Use it
// only for metadata your service authenticates (or that only a trusted
// proxy sets): any client can send any value. Wrap it with Hashed to keep
// secrets such as API keys out of the store's keys.
func Metadata(key string) KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		vs := metadata.ValueFromIncomingContext(ctx, key)
		if len(vs) == 0 || vs[0] == "" {
			return "", fmt.Errorf("%w: no %q metadata", ErrNoIdentity, key)
		}
		return "m:" + vs[0], nil
	}
}

// User returns a KeyFunc that keys a call by the authenticated user that
// an earlier interceptor put in its context, as id reads it (for example a
// function of your auth package): "u:" and the id. A call whose context
// has no user (id returns false or "") has no identity.
func User(id func(context.Context) (string, bool)) KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		u, ok := id(ctx)
		if !ok || u == "" {
			return "", fmt.Errorf("%w: no authenticated user", ErrNoIdentity)
		}
		return "u:" + u, nil
	}
}

// Composite returns a KeyFunc that keys a call by all of fns together (for
// example the user and the tenant): each must succeed. The parts are
// length-prefixed, so two different lists of parts never make the same
// key.
func Composite(fns ...KeyFunc) KeyFunc {
	return func(ctx context.Context, method string) (string, error) {
		return keyfn.Composite(len(fns), func(i int) (string, error) { return fns[i](ctx, method) }, ErrNoIdentity)
	}
}

// FirstOf returns a KeyFunc that keys a call by the first of fns that
// succeeds (for example the user if authenticated, else the peer IP). A
// call none of them identifies has no identity; the error is the last
// one's.
func FirstOf(fns ...KeyFunc) KeyFunc {
	return func(ctx context.Context, method string) (string, error) {
		return keyfn.FirstOf(len(fns), func(i int) (string, error) { return fns[i](ctx, method) }, ErrNoIdentity)
	}
}

// Hashed returns a KeyFunc that keys a call by a hash of fn's key: "#" and
// 43 characters (SHA-256, base64url). It bounds the key's length and keeps
// secrets such as API keys out of the store.
func Hashed(fn KeyFunc) KeyFunc {
	return func(ctx context.Context, method string) (string, error) {
		k, err := fn(ctx, method)
		if err != nil {
			return "", err
		}
		sum := sha256.Sum256([]byte(k))
		var b [1 + 43]byte
		b[0] = '#'
		base64.RawURLEncoding.Encode(b[1:], sum[:])
		return string(b[:]), nil
	}
}
