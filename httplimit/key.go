package httplimit

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/internal/keyfn"
)

// KeyFunc names the client a request comes from: the key it is limited
// under. It returns an error, never an empty key, when it cannot tell (the
// error wraps ErrNoIdentity): the middleware then answers with
// Config.OnNoIdentity instead of putting every such request in one bucket.
//
// The ready key functions give each kind of identity its own key space: an
// IP address is its text ("192.0.2.1", "2001:db8::/64"), a header value
// starts with "h:", a user with "u:", a hash with "#", so a client cannot
// pass one kind of key off as another.
type KeyFunc func(r *http.Request) (string, error)

// Errors of the key functions. A KeyFunc's error wraps one of them.
var (
	// ErrNoIdentity means the request does not say who the client is: a
	// missing header, no authenticated user, an address that does not parse.
	ErrNoIdentity = errors.New("httplimit: no client identity")
	// ErrKeyTooLong means the client's key is longer than the limiter's
	// MaxKeyLength: wrap the KeyFunc with Hashed to bound it.
	ErrKeyTooLong = errors.New("httplimit: client key too long")
)

// Header returns a KeyFunc that keys a request by the value of the header
// name (an API key, a tenant id): "h:" and the value. A request without the
// header, or with an empty value, has no identity. Use it only for a header
// your service authenticates (or that only a trusted proxy sets): any client
// can send any value. Wrap it with Hashed to keep secrets such as API keys
// out of the store's keys.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := r.Header[name]
		if len(v) == 0 || v[0] == "" {
			return "", fmt.Errorf("%w: no %s header", ErrNoIdentity, name)
		}
		return "h:" + v[0], nil
	}
}

// User returns a KeyFunc that keys a request by the authenticated user that
// an earlier middleware put in its context, as id reads it (for example a
// function of your auth package): "u:" and the id. A request whose context
// has no user (id returns false or "") has no identity.
func User(id func(context.Context) (string, bool)) KeyFunc {
	return func(r *http.Request) (string, error) {
		u, ok := id(r.Context())
		if !ok || u == "" {
			return "", fmt.Errorf("%w: no authenticated user", ErrNoIdentity)
		}
		return "u:" + u, nil
	}
}

// Composite returns a KeyFunc that keys a request by all of fns together
// (for example the user and the API key): each must succeed. The parts are
// length-prefixed, so two different lists of parts never make the same key.
func Composite(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		return keyfn.Composite(len(fns), func(i int) (string, error) { return fns[i](r) }, ErrNoIdentity)
	}
}

// FirstOf returns a KeyFunc that keys a request by the first of fns that
// succeeds (for example the user if authenticated, else the client IP). A
// request none of them identifies has no identity; the error is the last
// one's.
func FirstOf(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		return keyfn.FirstOf(len(fns), func(i int) (string, error) { return fns[i](r) }, ErrNoIdentity)
	}
}

// Hashed returns a KeyFunc that keys a request by a hash of fn's key: "#"
// and 43 characters (SHA-256, base64url). It bounds the key's length and
// keeps secrets such as API keys out of the store.
func Hashed(fn KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		k, err := fn(r)
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
