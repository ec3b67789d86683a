package main

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAnalyseFixture runs the check on a module of its own (testdata/mod):
// the names no other package uses are listed, a name only another
// package's tests use is reported apart, and a method called through
// another package's interface, a conventional String, a type met only as a
// result, and the package's own tests' uses are told apart.
func TestAnalyseFixture(t *testing.T) {
	// Not parallel: the check's settings are package variables.
	saved := []any{library, machinery, listDir, listPattern, listEnv}
	t.Cleanup(func() {
		library, machinery = saved[0].(string), saved[1].([]string)
		listDir, listPattern, listEnv = saved[2].(string), saved[3].(string), saved[4].([]string)
	})
	library = "example.com/lib"
	machinery = []string{"example.com/lib/mach"}
	listDir, listPattern, listEnv = "testdata/mod", "./...", []string{"GOWORK=off", "GOFLAGS=-mod=mod"}

	r, err := analyse()
	require.NoError(t, err)
	assert.Equal(t, []string{"example.com/lib/mach.T.Unused", "example.com/lib/mach.Unused"}, slices.Sorted(slices.Values(r.unused)))
	assert.Equal(t, []string{"example.com/lib/mach.TestOnly"}, r.onlyTests)
	assert.Empty(t, r.onlyOther)
	// Used, TestOnly, Unused, T (Used, Unused, String), Impl (Do), Made, Make.
	assert.Equal(t, 11, r.checked)
}
