package keyfn

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	errNone = errors.New("no identity")
	errA    = errors.New("a")
	errB    = errors.New("b")
)

// parts answers key(i) from a list of keys and errors.
func parts(keys []string, errs []error) func(int) (string, error) {
	return func(i int) (string, error) { return keys[i], errs[i] }
}

func TestCombinators(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		keys      []string
		errs      []error
		composite string
		compErr   error
		first     string
		firstErr  error
	}{
		{"none", nil, nil, "", errNone, "", errNone},
		{"one", []string{"u:ann"}, []error{nil}, "5:u:ann", nil, "u:ann", nil},
		{"two", []string{"ab", ""}, []error{nil, nil}, "2:ab0:", nil, "ab", nil},
		{"first fails", []string{"", "x"}, []error{errA, nil}, "", errA, "x", nil},
		{"all fail", []string{"", ""}, []error{errA, errB}, "", errA, "", errB},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, err := Composite(len(tc.keys), parts(tc.keys, tc.errs), errNone)
			if tc.compErr != nil {
				require.ErrorIs(t, err, tc.compErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.composite, k)
			k, err = FirstOf(len(tc.keys), parts(tc.keys, tc.errs), errNone)
			if tc.firstErr != nil {
				require.ErrorIs(t, err, tc.firstErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.first, k)
		})
	}
}

// TestFirstOfAllocs: a FirstOf whose first part succeeds allocates nothing
// of its own.
func TestFirstOfAllocs(t *testing.T) {
	key := func(int) (string, error) { return "u:ann", nil }
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = FirstOf(2, key, errNone) }))
}
