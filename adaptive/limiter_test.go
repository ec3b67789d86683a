package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adaptive"
)

// fixed is an Algorithm that never moves the limit.
type fixed struct{}

func (fixed) Update(limit float64, _ adaptive.Sample) float64 { return limit }

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts adaptive.Options
		ok   bool
	}{
		{"defaults", adaptive.Options{}, true},
		{"min above max", adaptive.Options{Min: 10, Max: 5}, false},
		{"negative min", adaptive.Options{Min: -1}, false},
		{"max above MaxLimit", adaptive.Options{Max: adaptive.MaxLimit + 1}, false},
		{"initial below min", adaptive.Options{Min: 10, Max: 20, Initial: 5}, false},
		{"initial above max", adaptive.Options{Max: 20, Initial: 30}, false},
		{"sheddable above default", adaptive.Options{Shares: adaptive.Shares{Default: 0.5, Sheddable: 0.6}}, false},
		{"default above 1", adaptive.Options{Shares: adaptive.Shares{Default: 1.2}}, false},
		{"negative sheddable", adaptive.Options{Shares: adaptive.Shares{Sheddable: -0.1}}, false},
		{"sheddable defaults below a small default", adaptive.Options{Shares: adaptive.Shares{Default: 0.5}}, true},
		{"AIMD without threshold", adaptive.Options{Algorithm: &adaptive.AIMD{}}, false},
		{"AIMD backoff 1", adaptive.Options{Algorithm: &adaptive.AIMD{Threshold: time.Second, Backoff: 1}}, false},
		{"Gradient2 tolerance below 1", adaptive.Options{Algorithm: &adaptive.Gradient2{Tolerance: 0.9}}, false},
		{"Gradient2 smoothing above 1", adaptive.Options{Algorithm: &adaptive.Gradient2{Smoothing: 1.5}}, false},
		{"Gradient2 negative interval", adaptive.Options{Algorithm: &adaptive.Gradient2{Interval: -time.Second}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, err := adaptive.New(tc.opts)
			if tc.ok {
				require.NoError(t, err)
				require.NotNil(t, l)
				return
			}
			require.ErrorIs(t, err, adaptive.ErrInvalidOptions)
		})
	}
}

// TestShedOrder fills a limit of 20 one slot at a time and checks, at each
// level, which priorities are admitted: sheddable below 16 (⌊20·0.8⌋),
// default below 19 (⌊20·0.95⌋), critical below 20.
func TestShedOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		shares adaptive.Shares
		caps   [adaptive.NumPriorities]int64
	}{
		{"default shares", adaptive.Shares{}, [adaptive.NumPriorities]int64{adaptive.Critical: 20, adaptive.Default: 19, adaptive.Sheddable: 16}},
		{"half and quarter", adaptive.Shares{Default: 0.5, Sheddable: 0.25}, [adaptive.NumPriorities]int64{adaptive.Critical: 20, adaptive.Default: 10, adaptive.Sheddable: 5}},
		{"no reserve", adaptive.Shares{Default: 1, Sheddable: 1}, [adaptive.NumPriorities]int64{adaptive.Critical: 20, adaptive.Default: 20, adaptive.Sheddable: 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, err := adaptive.New(adaptive.Options{Algorithm: fixed{}, Initial: 20, Shares: tc.shares})
			require.NoError(t, err)
			require.Equal(t, tc.caps, l.Stats().Caps)
			ctx := context.Background()
			var held []adaptive.Slot
			var shed [adaptive.NumPriorities]int64
			for n := int64(0); n <= 20; n++ {
				for _, p := range []adaptive.Priority{adaptive.Sheddable, adaptive.Default, adaptive.Critical} {
					s, err := l.Acquire(ctx, p)
					require.NoError(t, err)
					want := n < tc.caps[p]
					require.Equal(t, want, s.OK(), "%v with %d in flight", p, n)
					if s.OK() {
						s.Release(adaptive.Ignored) // probe only
					} else {
						shed[p]++
					}
				}
				if n < 20 {
					s, err := l.Acquire(ctx, adaptive.Critical)
					require.NoError(t, err)
					require.True(t, s.OK())
					held = append(held, s)
				}
			}
			st := l.Stats()
			assert.Equal(t, shed, st.Shed)
			assert.Equal(t, int64(20), st.InFlight)
			for _, s := range held {
				s.Release(adaptive.Ignored)
			}
			assert.Equal(t, int64(0), l.Stats().InFlight)
		})
	}
}

// TestFloorAndCeiling drives each algorithm to its extremes: every request
// dropped brings the limit down to the floor and no lower; fast requests
// with the limit full bring it up to the ceiling and no higher.
func TestFloorAndCeiling(t *testing.T) {
	t.Parallel()
	algs := map[string]func() adaptive.Algorithm{
		"AIMD":      func() adaptive.Algorithm { return &adaptive.AIMD{Threshold: 200 * time.Millisecond} },
		"Gradient2": func() adaptive.Algorithm { return &adaptive.Gradient2{} },
	}
	for name, alg := range algs {
		for _, tc := range []struct {
			dir     string
			outcome adaptive.Outcome
			want    int64
		}{
			{"floor", adaptive.Dropped, 5},
			{"ceiling", adaptive.Success, 50},
		} {
			t.Run(name+"/"+tc.dir, func(t *testing.T) {
				t.Parallel()
				clock := &virtualClock{}
				l, err := adaptive.New(adaptive.Options{Algorithm: alg(), Min: 5, Max: 50, Initial: 20, Clock: clock})
				require.NoError(t, err)
				ctx := context.Background()
				for range 300 {
					var held []adaptive.Slot
					for {
						s, err := l.Acquire(ctx, adaptive.Critical)
						require.NoError(t, err)
						if !s.OK() {
							break
						}
						held = append(held, s)
					}
					clock.Advance(150 * time.Millisecond) // a Gradient2 window; a round trip
					for _, s := range held {
						s.Release(tc.outcome)
						st := l.Stats()
						require.GreaterOrEqual(t, st.Limit, int64(5))
						require.LessOrEqual(t, st.Limit, int64(50))
					}
				}
				assert.Equal(t, tc.want, l.Stats().Limit)
			})
		}
	}
}

func TestReleaseIdempotent(t *testing.T) {
	t.Parallel()
	l, err := adaptive.New(adaptive.Options{Algorithm: fixed{}, Initial: 2})
	require.NoError(t, err)
	ctx := context.Background()
	a, err := l.Acquire(ctx, adaptive.Default)
	require.NoError(t, err)
	b, err := l.Acquire(ctx, adaptive.Critical)
	require.NoError(t, err)
	require.True(t, a.OK() && b.OK())
	require.Equal(t, int64(2), l.Stats().InFlight)

	copyA := a
	a.Release(adaptive.Success)
	a.Release(adaptive.Success)
	copyA.Done(nil)
	require.Equal(t, int64(1), l.Stats().InFlight)

	// a's slot is reused by c: a stale release must not free c's.
	c, err := l.Acquire(ctx, adaptive.Critical)
	require.NoError(t, err)
	require.True(t, c.OK())
	a.Release(adaptive.Dropped)
	require.Equal(t, int64(2), l.Stats().InFlight)

	require.NoError(t, l.Close())
	_, err = l.Acquire(ctx, adaptive.Critical)
	require.ErrorIs(t, err, adaptive.ErrClosed)
	b.Release(adaptive.Success)
	b.Release(adaptive.Success)
	c.Done(context.DeadlineExceeded)
	var zero adaptive.Slot
	zero.Release(adaptive.Success)
	st := l.Stats()
	assert.Equal(t, int64(0), st.InFlight)
	assert.Equal(t, int64(2), st.Completed)
	assert.Equal(t, int64(1), st.Dropped)
}

func TestAcquireErrors(t *testing.T) {
	t.Parallel()
	l, err := adaptive.New(adaptive.Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := l.Acquire(ctx, adaptive.Critical)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, s.OK())
	s, err = l.Acquire(context.Background(), adaptive.Priority(7))
	require.ErrorIs(t, err, adaptive.ErrInvalidPriority)
	require.False(t, s.OK())
	assert.Equal(t, int64(0), l.Stats().InFlight)
}

func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want adaptive.Outcome
	}{
		{nil, adaptive.Success},
		{context.DeadlineExceeded, adaptive.Dropped},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), adaptive.Dropped},
		{context.Canceled, adaptive.Ignored},
		{errors.New("bad request"), adaptive.Success},
	} {
		assert.Equal(t, tc.want, adaptive.OutcomeOf(tc.err), "%v", tc.err)
	}
}

// TestNoLeak: 10k requests from 8 goroutines, a third with a context
// cancelled before or during the request, a fifth panicking in the caller
// (recovered above the deferred release): every slot comes back.
func TestNoLeak(t *testing.T) {
	t.Parallel()
	clock := &virtualClock{}
	l, err := adaptive.New(adaptive.Options{Algorithm: &adaptive.AIMD{Threshold: time.Millisecond}, Min: 2, Max: 64, Clock: clock})
	require.NoError(t, err)
	var admitted, shed, refused atomic.Int64
	request := func(i int) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if i%6 == 0 {
			cancel() // before
		}
		s, err := l.Acquire(ctx, adaptive.Priority(i%adaptive.NumPriorities))
		if err != nil {
			refused.Add(1)
			return
		}
		if !s.OK() {
			shed.Add(1)
			return
		}
		admitted.Add(1)
		var reqErr error
		defer func() { s.Done(reqErr) }()
		clock.Advance(time.Duration(i%3) * time.Millisecond)
		if i%6 == 3 {
			cancel() // during
			reqErr = ctx.Err()
		}
		if i%5 == 0 {
			panic("handler failed")
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < 10_000; i += 8 {
				func() {
					defer func() { _ = recover() }()
					request(i)
				}()
			}
		})
	}
	wg.Wait()
	st := l.Stats()
	assert.Equal(t, int64(0), st.InFlight)
	assert.Equal(t, admitted.Load(), st.Completed+st.Dropped+st.Ignored)
	assert.Equal(t, int64(10_000), admitted.Load()+shed.Load()+refused.Load())
	assert.Positive(t, refused.Load())
	assert.Positive(t, st.Ignored)
}

// TestInFlightBound: 16 goroutines of mixed priorities on a limit of 8;
// the slots held, counted by the callers, never exceed the cap of the
// priority just admitted, nor the limit.
func TestInFlightBound(t *testing.T) {
	t.Parallel()
	l, err := adaptive.New(adaptive.Options{Algorithm: fixed{}, Initial: 8, Shares: adaptive.Shares{Default: 0.75, Sheddable: 0.5}})
	require.NoError(t, err)
	caps := l.Stats().Caps
	var held, over atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 2000 {
				p := adaptive.Priority((g + i) % adaptive.NumPriorities)
				s, err := l.Acquire(context.Background(), p)
				if err != nil || !s.OK() {
					continue
				}
				// held counts the slots whose holders have not yet
				// begun to release, so it is at most the in-flight
				// count at admission time plus those admitted since.
				if h := held.Add(1); h > 8 {
					over.Add(1)
				}
				held.Add(-1)
				s.Release(adaptive.Success)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(0), over.Load())
	assert.Equal(t, int64(0), l.Stats().InFlight)
	assert.Equal(t, [adaptive.NumPriorities]int64{adaptive.Critical: 8, adaptive.Default: 6, adaptive.Sheddable: 4}, caps)
}

// FuzzInFlightBound runs a sequence of acquisitions, releases and clock
// steps against an AIMD limit that moves: after every admission, in flight
// is within the cap of the admitted priority (so within the limit), and
// the limit within [Min, Max].
func FuzzInFlightBound(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{2, 2, 2, 2, 2, 2, 2, 2, 200, 201, 202, 203, 100})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 254, 253})
	f.Fuzz(func(t *testing.T, ops []byte) {
		clock := &virtualClock{}
		l, err := adaptive.New(adaptive.Options{Algorithm: &adaptive.AIMD{Threshold: 10 * time.Millisecond, Backoff: 0.5}, Min: 2, Max: 12, Initial: 6, Clock: clock})
		require.NoError(t, err)
		var held []adaptive.Slot
		for _, op := range ops {
			switch {
			case op < 128: // acquire, priority op%3
				p := adaptive.Priority(op % adaptive.NumPriorities)
				s, err := l.Acquire(context.Background(), p)
				require.NoError(t, err)
				if s.OK() {
					held = append(held, s)
					st := l.Stats()
					require.LessOrEqual(t, st.InFlight, st.Caps[p])
					require.LessOrEqual(t, st.Caps[p], st.Limit)
				}
			case op < 224: // release the oldest, outcome op%3
				if len(held) > 0 {
					held[0].Release(adaptive.Outcome(op % 3))
					held = held[1:]
				}
			default: // advance the clock
				clock.Advance(time.Duration(op-224) * time.Millisecond)
			}
			st := l.Stats()
			require.GreaterOrEqual(t, st.Limit, int64(2))
			require.LessOrEqual(t, st.Limit, int64(12))
			require.Equal(t, int64(len(held)), st.InFlight)
		}
		for _, s := range held {
			s.Release(adaptive.Success)
		}
		require.Equal(t, int64(0), l.Stats().InFlight)
	})
}
