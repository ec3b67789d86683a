package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redisproc"
)

// flagHelp is one flag's entry in the -h output: its name and its usage
// text (every line of it).
type flagHelp struct {
	name, text string
}

// usageFlags runs -h and splits the flags section into entries.
func usageFlags(t *testing.T) []flagHelp {
	t.Helper()
	var stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"-h"}, &bytes.Buffer{}, &stderr))
	_, flags, ok := strings.Cut(stderr.String(), "\nFlags:\n")
	require.True(t, ok, "no Flags: section in %q", stderr.String())
	var out []flagHelp
	for _, line := range strings.Split(flags, "\n") {
		switch {
		case strings.HasPrefix(line, "  -"):
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "  -"), " ")
			out = append(out, flagHelp{name: name})
		case strings.TrimSpace(line) == "":
		default:
			require.NotEmpty(t, out, "usage text before any flag: %q", line)
			out[len(out)-1].text += strings.TrimSpace(line) + "\n"
		}
	}
	return out
}

// defaultRE finds a stated default: "(default X" up to ")" or ";".
var defaultRE = regexp.MustCompile(`\(default[: ]`)

// TestUsageOneDefaultPerFlag: every flag's -h entry states at most one
// default, and the flags whose default depends on another flag state it
// (once, with the dependency).
func TestUsageOneDefaultPerFlag(t *testing.T) {
	t.Parallel()
	flags := usageFlags(t)
	require.Greater(t, len(flags), 20, "too few flags parsed from -h")
	for _, f := range flags {
		n := len(defaultRE.FindAllString(f.text, -1))
		assert.LessOrEqual(t, n, 1, "-%s states %d defaults: %q", f.name, n, f.text)
	}
	byName := map[string]string{}
	for _, f := range flags {
		byName[f.name] = f.text
	}
	for _, c := range []struct{ flag, want string }{
		{"duration", "(default 5s; 1h with -sim)"},
		{"rule", "(default 1000/1s; 100/1m with -sim)"},
		{"rate", "(default 8000; with -sim"},
		{"timeout", "(default 50ms on a real Redis, the library's; 250ms on the embedded stand-in"},
		{"budget", "(default 1%)"},
		{"profile", "(default all;"},
		{"instances", "(default 4)"},
		{"sync", "(default 100ms)"},
	} {
		assert.Contains(t, byName[c.flag], c.want, "-%s", c.flag)
	}
	assert.NotContains(t, byName, "child", "the internal child flag is listed")
}

// TestUsageDefaultsAreTrue: giving a flag the default its -h entry states
// (the first one, before any "; … with -x") parses to the same options as
// not giving it.
func TestUsageDefaultsAreTrue(t *testing.T) {
	t.Parallel()
	base, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	base.set = nil
	stated := regexp.MustCompile(`\(default ([^;)\s]+)`)
	checked := 0
	for _, f := range usageFlags(t) {
		m := stated.FindStringSubmatch(f.text)
		if m == nil {
			continue
		}
		if f.name == "timeout" && !redisproc.Available() {
			continue // the stand-in's default applies without a redis-server
		}
		o, err := parseFlags([]string{"-" + f.name, m[1]}, &bytes.Buffer{})
		if !assert.NoError(t, err, "-%s %s", f.name, m[1]) {
			continue
		}
		o.set = nil
		assert.Equal(t, base, o, "-%s %s (its stated default) differs from no -%s", f.name, m[1], f.name)
		checked++
	}
	assert.GreaterOrEqual(t, checked, 10, "too few stated defaults checked")
}

// TestDependentDefaults: the defaults that depend on another flag are the
// ones -h states.
func TestDependentDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		args  []string
		check func(t *testing.T, o *options)
	}{
		{"embedded timeout", []string{"-embedded"}, func(t *testing.T, o *options) { assert.Equal(t, embeddedTimeout, o.Timeout) }},
		{"outage timeout", []string{"-outage", "1s"}, func(t *testing.T, o *options) { assert.Equal(t, embeddedTimeout, o.Timeout); assert.False(t, o.local) }},
		{"default store", nil, func(t *testing.T, o *options) {
			// A throwaway redis-server if one is installed (CI has one),
			// with the library's timeout; else the stand-in and its own.
			assert.Equal(t, redisproc.Available(), o.local)
			if o.local {
				assert.Equal(t, sluice.DefaultTimeout, o.Timeout)
			} else {
				assert.Equal(t, embeddedTimeout, o.Timeout)
			}
		}},
		{"redis timeout", []string{"-redis", "127.0.0.1:1"}, func(t *testing.T, o *options) { assert.Equal(t, sluice.DefaultTimeout, o.Timeout) }},
		{"explicit timeout", []string{"-timeout", "70ms"}, func(t *testing.T, o *options) { assert.Equal(t, 70*time.Millisecond, o.Timeout) }},
		{"fleet rate", nil, func(t *testing.T, o *options) { assert.InDelta(t, 8000, o.Rate, 0) }},
		{"sim rate", []string{"-sim"}, func(t *testing.T, o *options) { assert.InDelta(t, 2000.0/60, o.Rate, 1e-9) }},
		{"as fast as possible", []string{"-rate", "0", "-profile", "steady"}, func(t *testing.T, o *options) { assert.Zero(t, o.Rate) }},
		{"sim duration", []string{"-sim"}, func(t *testing.T, o *options) { assert.Equal(t, time.Hour, o.Duration) }},
		{"sim rule", []string{"-sim"}, func(t *testing.T, o *options) { assert.Equal(t, "100/1m", o.RuleText) }},
		{"sweep profiles", []string{"-sweep", "sync=10ms,20ms"}, func(t *testing.T, o *options) {
			assert.Equal(t, []string{"steady", "sync-burst"}, o.Profiles)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			o, err := parseFlags(c.args, &bytes.Buffer{})
			require.NoError(t, err)
			c.check(t, o)
		})
	}
}

func TestBadDefaultedFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-duration", "0"}, "-duration"},
		{[]string{"-duration", "soon"}, "duration"},
		{[]string{"-timeout", "0s"}, "positive"},
		{[]string{"-rate", "fast"}, "number"},
		{[]string{"-rate", "-1"}, "-rate"},
	} {
		_, err := parseFlags(c.args, &bytes.Buffer{})
		if assert.Error(t, err, "%v", c.args) {
			assert.Contains(t, err.Error(), c.msg, "%v", c.args)
		}
	}
}
