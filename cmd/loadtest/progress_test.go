package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// drive runs p through two scenarios of 1s and 2s, the second reported
// only up to 90 % before it ends (as the fleet's last report may be), with
// late reports after each end (the fleet's watcher may still be running).
func drive(p progress) {
	p.begin(0, 2, "steady", time.Second)
	for _, f := range []float64{0.1, 0.5, 1} {
		p.at(0, f)
	}
	p.end(100, 1200*time.Millisecond)
	p.at(0, 1) // late, from the first scenario's watcher
	p.begin(1, 2, "boundary", 2*time.Second)
	for _, f := range []float64{0.3, 0.9} {
		p.at(1, f)
	}
	p.end(200, 2500*time.Millisecond)
	p.at(1, 0.95) // late
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

// TestBarProgressLateReports: the fleet's watcher reports from its own
// goroutine and may report a scenario after it ended; the bar still ends
// at 100 % (and -race finds no race).
func TestBarProgressLateReports(t *testing.T) {
	t.Parallel()
	var w bytes.Buffer
	p := newBarProgress(&w, 4*time.Second)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
				p.at(k%4, float64(k%10)/10)
			}
		}
	}()
	for i := range 4 {
		p.begin(i, 4, "steady", time.Second)
		p.at(i, 0.5)
		p.end(1, time.Second)
	}
	close(stop)
	<-done
	p.finish()
	out := w.String()
	assert.Contains(t, out[strings.LastIndex(out, "\r")+1:], "100%")
}
