package traffic

import (
	"math"
	"testing"
	"time"
)

func base(profile string) Params {
	return Params{Profile: profile, Rate: 2000, Duration: 4 * time.Second, Window: time.Second, Sub: 100 * time.Millisecond,
		Limit: 100, Keys: 10, Zipf: 1, MaxCost: 1, Instances: 4, Workers: 2, Sync: 100 * time.Millisecond, Seed: 7}
}

func TestDeterministic(t *testing.T) {
	for _, prof := range Profiles {
		if prof == Throughput {
			continue // no schedule (TestThroughputUnpaced)
		}
		p := base(prof)
		a, _ := p.Merged(0)
		b, _ := p.Merged(0)
		if len(a) == 0 || len(a) != len(b) {
			t.Fatalf("%s: %d vs %d checks", prof, len(a), len(b))
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s: check %d differs", prof, i)
			}
		}
		p.Seed++
		c, _ := p.Merged(0)
		if len(c) == len(a) && c[0] == a[0] {
			t.Errorf("%s: another seed offers the same checks", prof)
		}
	}
}

// Every rate-driven profile offers Rate on average, within Poisson noise.
func TestMeanRate(t *testing.T) {
	for _, prof := range []string{Steady, Bursty, SyncBurst, Zipf, Churn, Ramp, JoinLeave} {
		p := base(prof)
		cs, _ := p.Merged(0)
		want := p.Rate * p.Duration.Seconds()
		if d := math.Abs(float64(len(cs))-want) / want; d > 0.06 {
			t.Errorf("%s: %d checks, want about %.0f", prof, len(cs), want)
		}
		for i := 1; i < len(cs); i++ {
			if cs[i].At < cs[i-1].At || cs[i].At >= int64(p.Duration) {
				t.Fatalf("%s: unordered or late check %d", prof, i)
			}
		}
	}
}

// A Throughput scenario is unpaced whatever the rate, and has no schedule.
func TestThroughputUnpaced(t *testing.T) {
	p := base(Throughput)
	if p.Paced() {
		t.Fatal("a throughput scenario follows a schedule")
	}
	s := p.NewStream(0, 0, NewKeyDist(&p))
	for now := int64(0); now < 5; now++ {
		c, ok := s.Next(now)
		if !ok || c.At != now || int(c.Key) >= p.Keys {
			t.Fatalf("at %d: %+v %v", now, c, ok)
		}
	}
	if cs, _ := p.Merged(0); len(cs) != 0 {
		t.Errorf("%d scheduled checks", len(cs))
	}
	if !Valid(Throughput) || Profiles[len(Profiles)-1] != Throughput {
		t.Error("throughput is not the default run's last profile")
	}
}

func TestZipfKeys(t *testing.T) {
	p := base(Steady)
	p.Rate = 20000
	cs, _ := p.Merged(0)
	count := make([]int, p.Keys)
	for _, c := range cs {
		count[c.Key]++
	}
	d := NewKeyDist(&p)
	for k := range p.Keys {
		want := d.Prob(k) * float64(len(cs))
		if math.Abs(float64(count[k])-want) > 5*math.Sqrt(want)+5 {
			t.Errorf("key %d: %d, want about %.0f", k, count[k], want)
		}
	}
	if count[0] < 2*count[2] {
		t.Errorf("not skewed: %v", count)
	}
}

// The boundary attack offers about L per key in the δ before an even window
// boundary and L in the δ after it, and nothing in the quiet window.
func TestBoundary(t *testing.T) {
	p := base(Boundary)
	p.Keys = 1
	p.StoreT0 = 0
	cs, _ := p.Merged(0)
	delta, _, _ := p.boundaryGeometry()
	w := int64(p.Window)
	var before, after, quiet int
	for _, c := range cs {
		switch {
		case c.At >= 2*w-delta && c.At < 2*w:
			before++
		case c.At >= 2*w && c.At < 2*w+delta:
			after++
		case c.At >= 3*w && c.At < 4*w-delta:
			quiet++
		}
	}
	if math.Abs(float64(before-100)) > 40 || math.Abs(float64(after-100)) > 40 || quiet != 0 {
		t.Errorf("before %d after %d quiet %d (δ %v)", before, after, quiet, time.Duration(delta))
	}
}

func TestAttackedKeys(t *testing.T) {
	p := base(Boundary) // 2000/s, L = 100/s: about 7 keys of 10
	if n := p.AttackedKeys(); n != 7 {
		t.Errorf("attacked %d keys", n)
	}
	cs, _ := p.Merged(0)
	seen := map[uint32]bool{}
	for _, c := range cs {
		seen[c.Key] = true
	}
	if len(seen) != 7 {
		t.Errorf("%d keys offered", len(seen))
	}
	if want := p.Rate * p.Duration.Seconds(); math.Abs(float64(len(cs))-want)/want > 0.35 {
		t.Errorf("%d checks, want about %.0f", len(cs), want)
	}
}

func TestJoinLeave(t *testing.T) {
	p := base(JoinLeave)
	p.Instances = 5
	live := 0
	for i := range p.Instances {
		j, l := p.Lifetime(i)
		if j == 0 && l == int64(p.Duration) {
			live++
		} else if !(j > 0 && l > j && l < int64(p.Duration)) {
			t.Errorf("instance %d: %v–%v", i, time.Duration(j), time.Duration(l))
		}
	}
	if live != 3 {
		t.Errorf("%d instances stay the whole run", live)
	}
	if p.alive(0) != 3 || p.alive(int64(p.Duration)/2) != 5 {
		t.Errorf("alive: %d at start, %d at half", p.alive(0), p.alive(int64(p.Duration)/2))
	}
}

func TestChurnKeysLiveOneWindow(t *testing.T) {
	p := base(Churn)
	cs, _ := p.Merged(0)
	first := map[uint32]int64{}
	last := map[uint32]int64{}
	for _, c := range cs {
		if _, ok := first[c.Key]; !ok {
			first[c.Key] = c.At
		}
		last[c.Key] = c.At
	}
	for k := range first {
		if last[k]-first[k] > int64(p.Window) {
			t.Fatalf("key %d seen for %v", k, time.Duration(last[k]-first[k]))
		}
		if int(k) >= p.KeySpace() {
			t.Fatalf("key %d outside the key space %d", k, p.KeySpace())
		}
	}
	if len(first) < 3*p.Keys {
		t.Errorf("only %d keys", len(first))
	}
}

func TestValidate(t *testing.T) {
	p := base(Ramp)
	p.Rate = 0
	if p.Validate() == nil {
		t.Error("ramp without a rate")
	}
	p = base("nope")
	if p.Validate() == nil {
		t.Error("unknown profile")
	}
	p = base(Steady)
	p.MaxCost = 101
	if p.Validate() == nil {
		t.Error("cost above the limit")
	}
}

// Unpaced streams (rate 0) are due at once while active and respect the
// off phases of bursty traffic.
func TestUnpaced(t *testing.T) {
	p := base(Bursty)
	p.Rate = 0
	keys := NewKeyDist(&p)
	s := p.NewStream(0, 0, keys)
	c, ok := s.Next(0)
	if !ok {
		t.Fatal("no check")
	}
	period := int64(p.Window / 2)
	on := period / 5
	x := (c.At + s.phase) % period
	if x >= on {
		t.Errorf("check at %v is in an off phase", time.Duration(c.At))
	}
}

// The startup profile is quiet until 90% into a sub-window on the store
// clock, at least two sync intervals in, then offers every key 2·L in a
// burst and 4·L per window after it (more than Rate here).
func TestStartup(t *testing.T) {
	for _, t0 := range []int64{0, 12_345_678, int64(time.Hour) + 7} {
		p := base(Startup)
		p.StoreT0 = t0
		at := p.StartupAt()
		sub := int64(p.Sub)
		if phase := (t0 + at) % sub; phase != sub*9/10 {
			t.Errorf("t0 %d: starts at phase %v of a sub-window", t0, time.Duration(phase))
		}
		if at < int64(2*p.Sync) || at >= int64(2*p.Sync)+sub {
			t.Errorf("t0 %d: starts at %v", t0, time.Duration(at))
		}
		cs, _ := p.Merged(0)
		if len(cs) == 0 || cs[0].At < at {
			t.Fatalf("t0 %d: first check at %d, traffic starts at %d", t0, cs[0].At, at)
		}
		burst := int64(p.StartupBurst())
		var inBurst int
		for _, c := range cs {
			if c.At < at+burst {
				inBurst++
			}
		}
		if wantB := 2 * p.Limit * int64(p.Keys); math.Abs(float64(inBurst-int(wantB))) > 5*math.Sqrt(float64(wantB)) {
			t.Errorf("t0 %d: %d checks in the burst, want about %d", t0, inBurst, wantB)
		}
		want := float64(inBurst) + 4*float64(p.Limit*int64(p.Keys))*time.Duration(int64(p.Duration)-at-burst).Seconds()
		if d := math.Abs(float64(len(cs))-want) / want; d > 0.06 {
			t.Errorf("t0 %d: %d checks, want about %.0f", t0, len(cs), want)
		}
	}
}
