package grpclimit

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzPattern: any pattern is accepted or refused without a panic; an
// accepted one matches what it says, and nothing else of its kind.
func FuzzPattern(f *testing.F) {
	for _, s := range []string{"*", "/a.B/C", "/a.B/*", "/M", "/", "//", "/a/b/c", "/a.*/M", "/a.B/Get*", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		kind, key, err := parsePattern(p)
		if err != nil {
			return
		}
		r := &route{pattern: p}
		rt := router{method: map[string]*route{}, service: map[string]*route{}}
		require.NoError(t, rt.add(p, r))
		switch kind {
		case matchAll:
			assert.Equal(t, "*", p)
			assert.Same(t, r, rt.match("/any.Service/Method"))
		case matchService:
			assert.True(t, strings.HasSuffix(p, "/*") && key == p[:len(p)-1])
			assert.Same(t, r, rt.match(key+"Method"))
			assert.Nil(t, rt.match(key[:len(key)-1]+"x/Method"), "another service")
		case matchMethod:
			assert.Equal(t, p, key)
			assert.Same(t, r, rt.match(p))
			assert.Nil(t, rt.match(p+"x"), "another method")
		}
	})
}

// TestMatchNoAllocation: finding a call's route allocates nothing.
func TestMatchNoAllocation(t *testing.T) {
	rt := router{method: map[string]*route{}, service: map[string]*route{}}
	for _, p := range []string{"*", "/pkg.Svc/*", "/pkg.Svc/Get"} {
		require.NoError(t, rt.add(p, &route{pattern: p}))
	}
	var got *route
	allocs := testing.AllocsPerRun(100, func() {
		got = rt.match("/pkg.Svc/List")
	})
	assert.Zero(t, allocs)
	assert.Equal(t, "/pkg.Svc/*", got.pattern)
}
