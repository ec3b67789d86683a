package report

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/lat"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/oracle"
)

// TestVerdictCause: a ✗ is the fleet's (a broken promise) only where the
// algorithm run centrally on the same checks does better; where it falls
// as short, the ✗ is the algorithm's documented limit.
func TestVerdictCause(t *testing.T) {
	t.Parallel()
	base := oracle.Summary{LimitedKeys: 2, ExcessMax: 0.006, QuietKeys: 18, SpanQuietKeys: 17, HotKeys: 2,
		UtilizationMin: 1.01, AlgoUtilizationMin: 1.01}
	for _, c := range []struct {
		name      string
		algorithm string
		edit      func(a *oracle.Summary)
		promise   string
		cause     Cause
		why       string
	}{
		{"held", "sliding", func(*oracle.Summary) {}, PromiseUtilization, NoCause, ""},
		{"over ε", "sliding", func(a *oracle.Summary) { a.ExcessMax = 0.02 }, PromiseOverAdmission, FleetFault,
			"the fleet's fault: it admitted 2.0% of L more than the sliding run centrally"},
		{"denials, the algorithm's too", "fixed", func(a *oracle.Summary) { a.FalseDenialKeys, a.AlgoFalseDenialKeys = 1, 1 },
			PromiseNoFalseDenial, AlgorithmLimit, "the fixed run centrally on the same checks denies 1 of the 18 quiet keys too"},
		{"denials, sliding, within W plus a sub-window", "sliding", func(a *oracle.Summary) { a.FalseDenialKeys = 1 },
			PromiseNoFalseDenial, AlgorithmLimit, "each denied key was offered above 0.9·L in W plus one sub-window"},
		{"denials, sliding, a span-quiet key denied", "sliding", func(a *oracle.Summary) { a.FalseDenialKeys, a.SpanFalseDenialKeys = 2, 1 },
			PromiseNoFalseDenial, FleetFault, "the fleet's fault: it denied 2 quiet keys, the sliding run centrally on the same checks 0"},
		{"denials, fixed, more than the algorithm", "fixed", func(a *oracle.Summary) { a.FalseDenialKeys, a.AlgoFalseDenialKeys = 3, 1 },
			PromiseNoFalseDenial, FleetFault, "the fleet's fault: it denied 3 quiet keys"},
		{"utilization, the algorithm's own", "sliding", func(a *oracle.Summary) { a.UtilizationMin, a.AlgoUtilizationMin = 0.795, 0.80 },
			PromiseUtilization, AlgorithmLimit, "the sliding run centrally on the same checks gets 80.0% at its lowest, the fleet 79.5% (a sliding window frees"},
		{"utilization, above the algorithm's", "fixed", func(a *oracle.Summary) { a.UtilizationMin, a.AlgoUtilizationMin = 0.85, 0.80 },
			PromiseUtilization, AlgorithmLimit, "the fixed run centrally on the same checks gets 80.0% at its lowest, the fleet 85.0%"},
		{"utilization, below the algorithm's", "sliding", func(a *oracle.Summary) { a.UtilizationMin, a.AlgoUtilizationMin = 0.70, 0.80 },
			PromiseUtilization, FleetFault, "the fleet's fault: 10.0 points below 80.0%"},
		{"utilization, the algorithm makes it", "sliding", func(a *oracle.Summary) { a.UtilizationMin, a.AlgoUtilizationMin = 0.85, 0.95 },
			PromiseUtilization, FleetFault, "the fleet's fault: 5.0 points below 90.0% (the sliding run centrally on the same checks gets 95.0% at its lowest)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := scenario("steady", "")
			s.Settings.Algorithm = c.algorithm
			s.Accuracy = base
			c.edit(&s.Accuracy)
			var got *Check
			for _, ch := range Verdict(&s) {
				if ch.Promise == c.promise {
					got = &ch
				}
			}
			require.NotNil(t, got, "no check %q", c.promise)
			assert.Equal(t, c.cause, got.Cause)
			assert.Equal(t, c.cause == NoCause, got.Held)
			if c.why == "" {
				assert.Empty(t, got.Why)
			} else {
				assert.Contains(t, got.Why, c.why)
			}
		})
	}
}

// TestVerdictCauseBusy: a ✗ of the fleet's on a busy machine stays the
// fleet's, and says the machine was busy.
func TestVerdictCauseBusy(t *testing.T) {
	t.Parallel()
	s := scenario("throughput", "")
	s.Settings.Algorithm = "sliding"
	s.Accuracy = oracle.Summary{LimitedKeys: 2, ExcessMax: 0.006, HotKeys: 2, UtilizationMin: 0.898, AlgoUtilizationMin: 0.925}
	s.Machine = &Machine{CPUs: 2, Load1: 7.5}
	use := Verdict(&s)[2]
	require.Equal(t, PromiseUtilization, use.Promise)
	assert.Equal(t, FleetFault, use.Cause)
	assert.Contains(t, use.Why, "the fleet's fault: 0.2 points below 90.0% (the sliding run centrally on the same checks gets 92.5% at its lowest); "+
		"the machine was busy meanwhile (load average 7.5 on 2 CPUs)")
	assert.NotContains(t, Verdict(&s)[0].Why, "busy", "a check that held has no why")
}

// TestLatencyCause: a p99.9 above the target is the machine's when it was
// busy or bare local limiters were slow too, else Redis waits when most
// slow checks ran during a round trip, else the machine's (a CPU).
func TestLatencyCause(t *testing.T) {
	t.Parallel()
	slow, fast := 2*time.Millisecond, 2*time.Microsecond
	idle := &Machine{CPUs: 2, Load1: 1.5}
	for _, c := range []struct {
		name    string
		p999    time.Duration
		trips   int // of 10 slow checks
		machine *Machine
		peers   time.Duration
		cause   Cause
		why     string
	}{
		{"met", fast, 0, &Machine{CPUs: 2, Load1: 12}, slow, NoCause, ""},
		{"loaded machine", slow, 10, &Machine{CPUs: 2, Load1: 11.9}, fast, MachineLimit, "the machine's: it was busy: load average 11.9 on 2 CPUs"},
		{"steal", slow, 10, &Machine{CPUs: 2, Load1: 1, Steal: 0.12}, fast, MachineLimit, "it was busy: 12.0% CPU steal"},
		{"bare limiters slow", slow, 10, idle, 60 * time.Microsecond, MachineLimit, "bare local limiters, with no store, checked in the same run were slow too (p99.9 60µs)"},
		{"Redis waits", slow, 8, idle, 30 * time.Microsecond, StoreWaits, "Redis waits: 8 of the 10 slow checks ran while their instance waited for Redis"},
		{"not measured, Redis waits", slow, 8, nil, 0, StoreWaits, "Redis waits: 8 of the 10"},
		{"a CPU", slow, 2, idle, 0, MachineLimit, "the machine's: the slow checks waited for a CPU, not for Redis"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := scenario("steady", "")
			s.Machine = c.machine
			s.Waits.Latency = oracle.Latency{Within: lat.Quantiles{N: 10000, P999: c.p999, Slow: 10}, SlowTripWithin: c.trips}
			cause, why := LatencyCause(&s, c.peers)
			assert.Equal(t, c.cause, cause)
			if c.why == "" {
				assert.Empty(t, why)
			} else {
				assert.Contains(t, why, c.why)
			}
		})
	}
}

// TestMachineBusy: a machine is busy above BusyLoad per CPU or BusySteal.
func TestMachineBusy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		m    *Machine
		want string
	}{
		{"not measured", nil, ""},
		{"no CPUs read", &Machine{Load1: 40}, ""},
		{"the load test alone", &Machine{CPUs: 2, Load1: 3}, ""},
		{"at the limit", &Machine{CPUs: 2, Load1: 4, Steal: 0.05}, ""},
		{"loaded", &Machine{CPUs: 2, Load1: 4.1}, "load average 4.1 on 2 CPUs"},
		{"both", &Machine{CPUs: 8, Load1: 20, Steal: 0.3}, "load average 20.0 on 8 CPUs, 30.0% CPU steal"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, c.want, c.m.Busy())
		})
	}
}
