package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseCPULine: /proc/stat's cpu line gives the total jiffies (guest
// time not counted twice) and the steal among them.
func TestParseCPULine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name         string
		line         string
		total, steal uint64
		ok           bool
	}{
		{"full", "cpu  168473 0 60788 208965 858 0 8576 40 7 0", 447700, 40, true},
		{"no guest columns", "cpu 10 1 2 3 4 5 6 7", 38, 7, true},
		{"a CPU's line", "cpu0 10 1 2 3 4 5 6 7", 0, 0, false},
		{"too short", "cpu 10 1 2", 0, 0, false},
		{"not a number", "cpu 10 x 2 3 4 5 6 7", 0, 0, false},
		{"empty", "", 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			total, steal, ok := parseCPULine(c.line)
			assert.Equal(t, c.ok, ok)
			assert.Equal(t, c.total, total)
			assert.Equal(t, c.steal, steal)
		})
	}
}

// TestMachineBetween: steal is its share of the jiffies between the two
// samples, the load the larger of the two; nothing if either is unread.
func TestMachineBetween(t *testing.T) {
	t.Parallel()
	a := cpuSample{ok: true, total: 1000, steal: 10, load1: 3}
	b := cpuSample{ok: true, total: 1400, steal: 50, load1: 2.5}
	m := machineBetween(a, b)
	require.NotNil(t, m)
	assert.InDelta(t, 0.1, m.Steal, 1e-12)
	assert.InDelta(t, 3.0, m.Load1, 1e-12)
	assert.Positive(t, m.CPUs)
	assert.Nil(t, machineBetween(cpuSample{}, b))
	assert.Nil(t, machineBetween(b, b), "no time between")
}
