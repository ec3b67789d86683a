// Package sftest reads RFC 9651 structured fields for the tests of
// httplimit and grpclimit: both send the same RateLimit and
// RateLimit-Policy fields, as HTTP headers and as gRPC metadata.
package sftest

import (
	"testing"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/require"
)

// Items parses the values of the field named field as a List of Items
// named by sf-strings and returns the names in order and the items by
// name. Anything else fails tb.
func Items(tb testing.TB, field string, values []string) ([]string, map[string]httpsfv.Item) {
	tb.Helper()
	list, err := httpsfv.UnmarshalList(values)
	require.NoError(tb, err, "%s: %q", field, values)
	var names []string
	items := map[string]httpsfv.Item{}
	for _, m := range list {
		it, ok := m.(httpsfv.Item)
		require.True(tb, ok)
		s, ok := it.Value.(string)
		require.True(tb, ok)
		names = append(names, s)
		items[s] = it
	}
	return names, items
}
