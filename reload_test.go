package sluice_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// TestRequire: a set that leaves out a required rule is refused whole,
// naming the rule and who checks it; changing the rule is not leaving it
// out; once every holder releases, the rule may go.
func TestRequire(t *testing.T) {
	t.Parallel()
	a := policy.Rule{Name: "a", Limit: 5, Window: time.Minute}
	b := policy.Rule{Name: "b", Limit: 5, Window: time.Minute}
	l, err := sluice.New(sluice.Options{}, a, b)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	use(t, l, "a", "k", 3)

	_, err = l.Require("route x", "a", "nope")
	require.ErrorIs(t, err, sluice.ErrUnknownRule)
	assert.Contains(t, err.Error(), `"nope"`)
	require.NoError(t, l.SetRules(b), "the failed Require recorded nothing")
	require.NoError(t, l.SetRules(a, b))
	assert.Equal(t, int64(2), remaining(t, l, "a", "k"), "a came back with its counts")

	release1, err := l.Require(`route "/x"`, "a")
	require.NoError(t, err)
	release2, err := l.Require(`route "/y"`, "a", "b")
	require.NoError(t, err)

	err = l.SetRules(b)
	require.ErrorIs(t, err, sluice.ErrRuleInUse)
	assert.Contains(t, err.Error(), `"a" (checked by route "/x", route "/y")`)
	assert.Equal(t, int64(2), remaining(t, l, "a", "k"), "the refused set changed nothing")

	bigger := with(a, func(r *policy.Rule) { r.Limit = 10 })
	require.NoError(t, l.SetRules(bigger, b), "a changed rule is not left out")
	assert.Equal(t, int64(7), remaining(t, l, "a", "k"))

	release1()
	release1() // idempotent: route "/y" still holds a
	err = l.SetRules(b)
	require.ErrorIs(t, err, sluice.ErrRuleInUse)
	assert.NotContains(t, err.Error(), `"/x"`)
	err = l.SetRules(bigger)
	require.ErrorIs(t, err, sluice.ErrRuleInUse)
	assert.Contains(t, err.Error(), `"b" (checked by route "/y")`)

	release2()
	require.NoError(t, l.SetRules(b))
	_, err = l.Allow(context.Background(), "a", "k")
	require.ErrorIs(t, err, sluice.ErrUnknownRule)
}

// TestSetRulesRemoveAndReAdd: a Local rule (and its tier, and a bucket)
// left out and brought back within its window keeps its counts; one that
// comes back changed, or after its window, starts afresh.
func TestSetRulesRemoveAndReAdd(t *testing.T) {
	t.Parallel()
	win := policy.Rule{Name: "win", Limit: 4, Window: time.Minute, Overrides: []policy.Override{{Tier: "pro", Limit: 6, Keys: []string{"acme"}}}}
	gcra := policy.Rule{Name: "gcra", Limit: 4, Window: time.Minute, Algorithm: policy.GCRA}
	keep := policy.Rule{Name: "keep", Limit: 1, Window: time.Hour}
	tests := []struct {
		name       string
		after      time.Duration // from the removal to the re-add
		back       []policy.Rule
		win, tier  int64 // win's remaining for k, and for acme (its tier), once back
		gcraRemain int64
	}{
		{"back at once", 0, []policy.Rule{keep, win, gcra}, 0, 0, 0},
		{"back within the window", 50 * time.Second, []policy.Rule{keep, win, gcra}, 0, 0, 3},
		{"back after the window", 61 * time.Second, []policy.Rule{keep, win, gcra}, 4, 6, 4},
		{"back with another window", 0, []policy.Rule{keep, with(win, func(r *policy.Rule) { r.Window = 2 * time.Minute }), gcra}, 4, 6, 0},
		{"back with another limit", 0, []policy.Rule{keep, with(win, func(r *policy.Rule) { r.Limit = 5 }), gcra}, 1, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
			l := newAlgoLimiter(t, c, keep, win, gcra)
			use(t, l, "win", "k", 4)
			use(t, l, "win", "acme", 6)
			use(t, l, "gcra", "k", 4)
			require.NoError(t, l.SetRules(keep))
			_, err := l.Allow(context.Background(), "win", "k")
			require.ErrorIs(t, err, sluice.ErrUnknownRule)
			c.add(int64(tt.after))
			require.NoError(t, l.SetRules(tt.back...))
			assert.Equal(t, tt.win, remaining(t, l, "win", "k"), "win")
			assert.Equal(t, tt.tier, remaining(t, l, "win", "acme"), "win's tier pro")
			assert.Equal(t, tt.gcraRemain, remaining(t, l, "gcra", "k"), "gcra")
			if tt.win == 0 {
				d, err := l.Allow(context.Background(), "win", "k")
				require.NoError(t, err)
				assert.False(t, d.Allowed, "an exhausted key stays exhausted: no second limit in one window")
			}
		})
	}
}

// TestSetRulesRemoveAndReAddKept: a rule kept retired through several
// sets (one without it, then another without it) still comes back whole,
// and the log says its counts were kept.
func TestSetRulesRemoveAndReAddKept(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	a := policy.Rule{Name: "a", Limit: 3, Window: time.Minute}
	b := policy.Rule{Name: "b", Limit: 3, Window: time.Minute}
	l, err := sluice.New(sluice.Options{Logger: newTextLogger(&logs)}, a, b)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	use(t, l, "a", "k", 3)
	require.NoError(t, l.SetRules(b))
	require.NoError(t, l.SetRules(with(b, func(r *policy.Rule) { r.Limit = 4 })))
	require.NoError(t, l.SetRules(a, b))
	assert.Equal(t, int64(0), remaining(t, l, "a", "k"))
	assert.Contains(t, logs.String(), "a (counts kept)")
}

// TestSetRulesRemoveAndReAddShared: a shared rule left out pushes its
// counts; brought back, it finds them in the store.
func TestSetRulesRemoveAndReAddShared(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	api := policy.Rule{Name: "api", Limit: 100, Window: time.Minute}
	other := policy.Rule{Name: "other", Limit: 100, Window: time.Minute}
	l, err := sluice.New(sluice.Options{Redis: client, Timeout: 2 * time.Second}, api, other)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	use(t, l, "api", "k", 30)
	require.NoError(t, l.SetRules(other))
	require.NoError(t, l.Flush(context.Background())) // the retired rule's last push
	require.NoError(t, l.SetRules(api, other))
	use(t, l, "api", "k", 1)
	require.NoError(t, l.Flush(context.Background()))
	assert.Equal(t, int64(69), remaining(t, l, "api", "k"))
}

func newTextLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, nil))
}
