package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// drive runs p through two scenarios of 1s and 2s, the second reported
// only up to 90 % before it ends (as the fleet's last report may be).
func drive(p progress) {
	p.begin(0, 2, "steady", time.Second)
	for _, f := range []float64{0.1, 0.5, 1} {
		p.at(f)
	}
	p.end(100, 1200*time.Millisecond)
	p.begin(1, 2, "boundary", 2*time.Second)
	for _, f := range []float64{0.3, 0.9} {
		p.at(f)
	}
	p.end(200, 2500*time.Millisecond)
	p.finish()
}

func TestProgress(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		quiet, tty  bool
		want        []string
		wantNoCR    bool
		wantNothing bool
	}{
		{name: "quiet", quiet: true, tty: true, wantNothing: true},
		{name: "pipe", want: []string{
			"loadtest: [1/2] steady done: 100 checks in 1.2s\n",
			"loadtest: [2/2] boundary done: 200 checks in 2.5s\n",
		}, wantNoCR: true},
		// On a terminal the bar reaches 100 % though the last scenario's
		// last report said 90 %, and ends its line.
		{name: "terminal", tty: true, want: []string{"[2/2] boundary", "100%"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var w bytes.Buffer
			drive(newProgress(&w, c.quiet, c.tty, 3*time.Second))
			out := w.String()
			if c.wantNothing {
				assert.Empty(t, out)
				return
			}
			for _, s := range c.want {
				assert.Contains(t, out, s)
			}
			if c.wantNoCR {
				assert.NotContains(t, out, "\r")
				assert.Equal(t, strings.Join(c.want, ""), out)
			} else {
				assert.True(t, strings.HasSuffix(out, "\n"), "the bar does not end its line: %q", out)
				last := out[strings.LastIndex(out, "\r")+1:]
				assert.Contains(t, last, "100%", "the last frame is not at 100 %%: %q", last)
			}
		})
	}
}

func TestIsTerminal(t *testing.T) {
	t.Parallel()
	assert.False(t, isTerminal(&bytes.Buffer{}))
}
