// Package keyfn holds the combinators behind httplimit's and grpclimit's
// Composite and FirstOf, written once for both key function types: each
// package's function calls these with a closure over its own arguments.
package keyfn

import (
	"fmt"
	"strconv"
	"strings"
)

// Composite returns the key made of the n parts key(0) … key(n-1), each
// length-prefixed ("3:abc"), so two different lists of parts never make
// the same key. The first part that fails fails it with its error; no
// parts at all is an error wrapping noIdentity.
func Composite(n int, key func(i int) (string, error), noIdentity error) (string, error) {
	if n == 0 {
		return "", fmt.Errorf("%w: Composite of no key functions", noIdentity)
	}
	var b strings.Builder
	for i := range n {
		k, err := key(i)
		if err != nil {
			return "", err
		}
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
	}
	return b.String(), nil
}

// FirstOf returns the first of key(0) … key(n-1) that succeeds; when none
// does, the last one's error; no parts at all is an error wrapping
// noIdentity.
func FirstOf(n int, key func(i int) (string, error), noIdentity error) (string, error) {
	if n == 0 {
		return "", fmt.Errorf("%w: FirstOf of no key functions", noIdentity)
	}
	var err error
	for i := range n {
		var k string
		if k, err = key(i); err == nil {
			return k, nil
		}
	}
	return "", err
}
