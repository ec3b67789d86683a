package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/window"
)

// recoverTime must return exactly the time a decision was made at, from its
// ResetAfter, for any delay up to the period minus the margin between the
// decision and our reading of the clock, and for a reading slightly behind it.
func TestRecoverTime(t *testing.T) {
	for _, geo := range []window.Sliding{window.NewSliding(time.Second, 10), window.NewSliding(time.Minute, 1), window.NewFixed(time.Second), window.NewSliding(10*time.Millisecond, 5)} {
		period := geo.Sub() // a fixed window's is the window
		margin := recoveryMargin(period)
		for _, dec := range []int64{1_700_000_000_123_456_789, 0, 999, -5 * int64(time.Second), 1_700_000_000_000_000_000} {
			ra := geo.ResetAfter(dec)
			for _, delay := range []int64{0, 1, period / 2, period - margin - 1, -margin + 1, -1} {
				if got := recoverTime(dec+delay, ra, period, margin); got != dec {
					t.Errorf("geo %v/%d: decision %d read %d later: recovered %d (off by %d)", geo.Window(), geo.Buckets(), dec, delay, got, got-dec)
				}
			}
		}
	}
	if got := recoverTime(42, 0, 100, 25); got != 42 {
		t.Errorf("without ResetAfter: %d", got)
	}
}

func TestHist(t *testing.T) {
	var h Hist
	if h.Quantile(0.5) != 0 {
		t.Fatal("empty")
	}
	for i := int64(1); i <= 1000; i++ {
		h.Add(i * 1000) // 1µs … 1ms
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, time.Millisecond}} {
		got := h.Quantile(c.q)
		if d := float64(got-c.want) / float64(c.want); d < -0.07 || d > 0.07 {
			t.Errorf("q%v = %v, want %v ±7%%", c.q, got, c.want)
		}
	}
	var g Hist
	g.Add(5)
	g.Merge(&h)
	if g.N != 1001 || g.Max != 1_000_000 {
		t.Errorf("merge: n %d max %d", g.N, g.Max)
	}
	if s := h.ShareAtLeast(900_000); s < 0.09 || s > 0.16 {
		t.Errorf("share ≥ 900µs = %v", s)
	}
}

// Whatever a call's length, the time it was decided at is among the
// candidates recoverTime and earlier leave (T, T − period, …, T −
// early·period), and a short call leaves one.
func TestEarlierCoversDecision(t *testing.T) {
	t.Parallel()
	geo := window.NewSliding(time.Second, 10)
	period := geo.Sub()
	margin := recoveryMargin(period)
	base := int64(1_700_000_000_123_456_789)
	cases := []struct {
		name string
		// the decision is made lag after the call starts (negative: the
		// limiter's clock lags the caller's), the call returns wait after
		// the decision
		lag, wait int64
		early     uint8 // the candidates expected before the latest
	}{
		{"no time at all", 0, 0, 0},
		{"a fast local check", 300, 200, 0},
		{"a limiter clock 60 ms behind", -60 * int64(time.Millisecond), 1000, 0},
		{"a round trip of 2 ms", 1000, 2 * int64(time.Millisecond), 0},
		{"a reply read 80 ms late", 1000, 80 * int64(time.Millisecond), 1},
		{"a check waiting 330 ms", 5 * int64(time.Millisecond), 325 * int64(time.Millisecond), 3},
		{"decided 330 ms into the call", 330 * int64(time.Millisecond), 1000, 3},
		{"a goroutine away for a minute", 0, int64(time.Minute), 255},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for off := int64(0); off < period; off += period / 7 {
				start := base + off
				dec := start + c.lag
				after := dec + c.wait
				got := recoverTime(after, geo.ResetAfter(dec), period, margin)
				early := earlier(got, start, period, margin)
				require.GreaterOrEqual(t, got, dec, "recorded before the decision")
				if early < 255 {
					require.Zero(t, (got-dec)%period)
					require.LessOrEqual(t, (got-dec)/period, int64(early), "the decision is not among the candidates")
				}
				if c.early == 0 {
					require.Zero(t, early, "a short call has one candidate")
				} else {
					require.InDelta(t, c.early, early, 1, "candidates: got %d", early)
				}
			}
		})
	}
}
