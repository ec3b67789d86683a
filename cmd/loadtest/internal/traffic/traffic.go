// Package traffic generates the load test's offered traffic: the profiles
// listed under Profiles (steady Poisson, on/off bursts, bursts right after a
// sync, window-boundary attacks, Zipf over many keys, key churn, ramps,
// instances joining and leaving) as deterministic streams of checks (time,
// key, cost), one stream per worker goroutine, so that the same seed offers
// the same checks whether the fleet runs in one process, in many, or in
// simulation.
//
// Every profile is an inhomogeneous Poisson process: a total rate λ(t),
// piecewise constant, split evenly over the streams of the instances alive at
// t, and a key distribution. Times are offsets in ns from the run's start; the
// run's start on the store clock (Params.StoreT0) aligns window boundaries for
// the profiles that aim at them.
package traffic

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Profile names.
const (
	Steady    = "steady"     // Poisson at Rate over Keys keys
	Bursty    = "bursty"     // on/off per instance, Rate on average
	SyncBurst = "sync-burst" // every instance bursts together right after a sync
	Boundary  = "boundary"   // a full limit before a window boundary, again after it
	Zipf      = "zipf"       // Poisson over many keys, Zipf-distributed
	Churn     = "churn"      // each key seen for one window only
	Ramp      = "ramp"       // rate ramps from 0 up to 2·Rate and back down
	JoinLeave = "join-leave" // half the instances join and leave mid-run
	Startup   = "startup"    // every instance hammers a few keys from a cold start at a bad phase
	// Throughput: every worker checks as fast as it can, whatever Rate,
	// over Keys keys (Zipf): how many checks a second the fleet sustains.
	Throughput = "throughput"
)

// Profiles lists every profile, in the order the default run uses;
// Throughput last (it runs for at most ThroughputDuration).
var Profiles = []string{Steady, Bursty, SyncBurst, Boundary, Startup, Zipf, Churn, Ramp, JoinLeave, Throughput}

// Describe returns a one-line description of a profile.
func Describe(p string) string {
	switch p {
	case Steady:
		return "steady Poisson arrivals at -rate over -keys keys (Zipf -zipf)"
	case Bursty:
		return "on/off: each instance offers 5× its share for 20% of every half window, at its own random phase"
	case SyncBurst:
		return "every instance flushes (syncs), then all burst together for a quarter sync interval; -rate on average"
	case Boundary:
		return "per attacked key: L in the last moment of a window, L again at the start of the next, then pressure; a quiet window between attacks; as many keys attacked (up to -keys) as make about -rate"
	case Zipf:
		return "steady Poisson over many keys (default 1000), Zipf-distributed"
	case Churn:
		return "each key is offered for one window only; -keys keys alive at a time, uniform"
	case Ramp:
		return "the rate ramps linearly from 0 to 2 × -rate and back to 0"
	case JoinLeave:
		return "half the instances join and leave mid-run (staggered); the rate is split over the live ones"
	case Throughput:
		return "every worker checks as fast as it can (whatever -rate) over -keys keys (Zipf -zipf), for at most " + ThroughputDuration.String() + ": the checks a second the fleet sustains"
	case Shift:
		return "a key's traffic moves between instances: all at once (a quiet key uses 0.3·L on one instance, then 0.5·L at once on the next; a hot key hops at 1/3 and 2/3 of the run), round robin (each check on the next instance), draining (A's share falls to 0 from 1/3 to 2/3 while B's grows), or sticky (the control: never moves); needs 2 instances"
	case Deploy:
		return "instances replaced one by one: each drained (its traffic to the others), closed half a window later, and a new one (new InstanceID) started in its place; keys sticky to an instance (on the next meanwhile; a quiet one bursts as its home is drained) or spread over those up; needs 2 instances"
	case Reload:
		return "every instance watches one rules file, rewritten in place (truncated, then written in two parts) every 0.25s from 1/5 to 4/5 of the run, from the middle one on with another rule's limit changed; also judged: no check errors"
	case StoreLoss:
		return "FLUSHALL on the store at 30% of the run, and again every fifth of it (at least a window apart) until 80% (the store's counts lost); on -redis, only a Redis holding nothing but the load test's keys"
	case Startup:
		return "cold start: quiet, then a burst of 2× the limit per key in a twentieth of a sub-window from 90% into it (clients starting, a retry storm: what a weighted window lets through twice), then 4× the limit; at least -rate"
	}
	return ""
}

// Valid reports whether p names a profile: one of Profiles or of
// Operations.
func Valid(p string) bool { return slices.Contains(Profiles, p) || IsOperation(p) }

// Params describe a run's traffic.
type Params struct {
	Profile   string
	Rate      float64       // total offered checks/s; 0 = as fast as possible
	Duration  time.Duration // length of the run
	Window    time.Duration // the rule's window W
	Sub       time.Duration // the rule's sub-window w (W for a fixed window)
	Limit     int64         // the rule's limit L
	Keys      int           // key-space parameter (see the profiles)
	Zipf      float64       // Zipf exponent over keys; 0 = uniform
	MaxCost   int           // each check costs 1..MaxCost, uniformly
	Instances int
	Workers   int           // streams per instance
	Sync      time.Duration // sync interval (SyncBurst)
	Seed      uint64
	StoreT0   int64 // store-clock time of offset 0, ns
	// AttackWidth is δ, the length of each boundary-attack burst; 0 means
	// min(W/20, w/4).
	AttackWidth time.Duration
}

// KeySpace returns the number of distinct keys the run can use.
func (p *Params) KeySpace() int {
	switch p.Profile {
	case Churn:
		life := float64(p.Window)
		return p.Keys + int(math.Ceil(float64(p.Duration)/life*float64(p.Keys)))
	}
	return p.Keys
}

// Validate reports what is wrong with p.
func (p *Params) Validate() error {
	switch {
	case !Valid(p.Profile):
		return fmt.Errorf("unknown profile %q: use one of %s", p.Profile, strings.Join(Profiles, ", "))
	case p.Rate < 0 || math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0):
		return fmt.Errorf("rate %v: it must be ≥ 0 (0 = as fast as possible)", p.Rate)
	case p.Instances < MinInstances(p.Profile):
		return fmt.Errorf("profile %s moves traffic between instances: it needs at least %d (-instances)", p.Profile, MinInstances(p.Profile))
	case p.Rate == 0 && p.Profile == Ramp:
		return fmt.Errorf("profile %s needs a finite -rate (it ramps it)", p.Profile)
	case p.Duration <= 0:
		return fmt.Errorf("duration %v: it must be positive", p.Duration)
	case p.Window <= 0 || p.Sub <= 0 || p.Limit < 1:
		return fmt.Errorf("bad rule geometry")
	case p.Keys < 1:
		return fmt.Errorf("keys %d: it must be at least 1", p.Keys)
	case p.KeySpace() > 1<<24:
		return fmt.Errorf("profile %s with %d keys over %v needs %d keys; the most is %d", p.Profile, p.Keys, p.Duration, p.KeySpace(), 1<<24)
	case p.Zipf < 0 || math.IsNaN(p.Zipf):
		return fmt.Errorf("zipf %v: it must be ≥ 0 (0 = uniform)", p.Zipf)
	case p.MaxCost < 1 || int64(p.MaxCost) > p.Limit:
		return fmt.Errorf("cost %d: it must be between 1 and the limit %d", p.MaxCost, p.Limit)
	case p.Instances < 1 || p.Workers < 1:
		return fmt.Errorf("instances and workers must be at least 1")
	}
	return nil
}

// Paced reports whether checks follow a schedule (false: as fast as possible
// while the profile is active).
func (p *Params) Paced() bool {
	return (p.Rate > 0 || p.Profile == Boundary || IsOperation(p.Profile)) && p.Profile != Throughput
}

// ThroughputDuration is the longest a Throughput scenario runs: every check
// is recorded (24 bytes) and replayed, and an unpaced fleet makes millions a
// second.
const ThroughputDuration = 2 * time.Second

// Lifetime returns when instance i joins and leaves, as offsets.
func (p *Params) Lifetime(i int) (join, leave int64) {
	d := int64(p.Duration)
	if p.Profile != JoinLeave {
		return 0, d
	}
	stay := (p.Instances + 1) / 2
	if i < stay {
		return 0, d
	}
	m := p.Instances - stay
	j := i - stay
	frac := float64(j) / float64(m)
	return int64(float64(d) * (0.15 + 0.3*frac)), int64(float64(d) * (0.55 + 0.3*frac))
}

// alive returns the number of instances alive at offset t.
func (p *Params) alive(t int64) int {
	n := 0
	for i := range p.Instances {
		if j, l := p.Lifetime(i); t >= j && t < l {
			n++
		}
	}
	return n
}

// nextLifeChange returns the first join or leave after t (or the end).
func (p *Params) nextLifeChange(t int64) int64 {
	next := int64(p.Duration)
	for i := range p.Instances {
		j, l := p.Lifetime(i)
		if j > t && j < next {
			next = j
		}
		if l > t && l < next {
			next = l
		}
	}
	return next
}

// BurstPeriod returns the sync-burst period and burst length.
func (p *Params) BurstPeriod() (period, length int64) {
	period = int64(max(5*p.Sync, p.Window/2))
	length = int64(max(p.Sync/4, 100*time.Microsecond))
	return period, length
}

// burstStart is the offset of the first sync-burst burst: half a period in,
// or a third of the run if that is sooner (long sync intervals).
func (p *Params) burstStart() int64 {
	period, _ := p.BurstPeriod()
	return min(period/2, int64(p.Duration)/3)
}

// BurstTimes returns the offsets at which sync-burst bursts start.
func (p *Params) BurstTimes() []int64 {
	if p.Profile != SyncBurst {
		return nil
	}
	period, _ := p.BurstPeriod()
	var ts []int64
	for b := p.burstStart(); b < int64(p.Duration); b += period {
		ts = append(ts, b)
	}
	return ts
}

// boundaryGeometry returns δ (the attack burst length) and the pressure
// rates per key of the boundary profile: low through the attacked window,
// high in its last sub-window, where a sliding window's packed oldest
// sub-window decays and makes room.
func (p *Params) boundaryGeometry() (delta int64, low, high float64) {
	delta = int64(min(p.Window/20, p.Sub/4))
	if p.AttackWidth > 0 {
		delta = int64(p.AttackWidth)
	}
	delta = max(delta, 1)
	l := float64(p.Limit)
	low = 2 * l / p.Window.Seconds()
	high = max(low, 2*l/p.Sub.Seconds())
	return delta, low, high
}

// AttackedKeys returns how many keys the boundary profile attacks: each costs
// about 3·L per window on average (2·L in bursts and about 4·L of pressure
// every two windows), so as many as make about Rate, at least 1 and at most
// Keys (all of them when unpaced).
func (p *Params) AttackedKeys() int {
	if p.Rate <= 0 {
		return p.Keys
	}
	n := int(math.Round(p.Rate * p.Window.Seconds() / (3 * float64(p.Limit))))
	return min(max(n, 1), p.Keys)
}

// startupPhase is how far into a sub-window the startup profile's traffic
// starts: late, so that a weighted window, which spreads the burst over the
// whole sub-window, frees room for it while it is still inside the window.
const startupPhase = 0.9

// StartupAt returns the offset at which the startup profile's traffic starts:
// the first moment at startupPhase of a sub-window on the store clock after a
// lead of two sync intervals (every instance has registered and synced).
func (p *Params) StartupAt() int64 {
	sub := int64(p.Sub)
	s := p.StoreT0 + int64(max(2*p.Sync, 50*time.Millisecond))
	at := floorDiv(s, sub)*sub + int64(startupPhase*float64(sub))
	if at < s {
		at += sub
	}
	return min(at-p.StoreT0, int64(p.Duration)/4)
}

// StartupRate returns the startup profile's fleet-wide rates: in its opening
// burst, 2·L per key within StartupBurst; after it, each key offered 4·L per
// window, or Rate if that is more.
func (p *Params) StartupRate() (burst, after float64) {
	keys := float64(p.Keys)
	burst = 2 * float64(p.Limit) * keys / p.StartupBurst().Seconds()
	return burst, max(p.Rate, 4*float64(p.Limit)*keys/p.Window.Seconds())
}

// StartupBurst returns the length of the startup profile's opening burst: a
// twentieth of a sub-window, at least a millisecond.
func (p *Params) StartupBurst() time.Duration {
	return max(p.Sub/20, time.Millisecond)
}

// segment is the total rate from the current time until `until` (offsets).
type segment struct {
	rate  float64 // checks/s, whole fleet; +Inf = as fast as possible
	until int64
}

// total returns the fleet-wide rate at offset t for instance inst's view
// (bursty phases are per instance), and how long it holds.
func (p *Params) total(inst int, phase int64, t int64) segment {
	end := int64(p.Duration)
	r := p.Rate
	if r == 0 {
		r = math.Inf(1)
	}
	switch p.Profile {
	case Bursty:
		period := int64(p.Window / 2)
		on := period / 5
		x := (t + phase) % period
		if x < on {
			return segment{r * 5, min(t+on-x, end)}
		}
		return segment{0, min(t+period-x, end)}
	case SyncBurst:
		period, length := p.BurstPeriod()
		first := p.burstStart()
		if t < first {
			return segment{0, first}
		}
		x := (t - first) % period
		if x < length {
			return segment{r * float64(period) / float64(length), min(t+length-x, end)}
		}
		return segment{0, min(t+period-x, end)}
	case Boundary:
		// Attack cycles of two windows, aligned on the store clock: the
		// boundary b is a window boundary; [b−δ, b) and [b, b+δ) carry L
		// each per key, [b+δ, b+W−w) low pressure, [b+W−w, b+W) high
		// pressure, [b+W, b+2W−δ) nothing.
		w := int64(p.Window)
		delta, low, high := p.boundaryGeometry()
		sub := min(int64(p.Sub), w-2*delta)
		keys := float64(p.AttackedKeys())
		s := p.StoreT0 + t
		// Cycle start c = b − δ with b ≡ 0 (mod 2W) on the store clock.
		c := floorDiv(s+delta, 2*w)*2*w - delta
		x := s - c
		burst := keys * float64(p.Limit) / (float64(delta) / 1e9)
		switch {
		case x < 2*delta:
			return segment{burst, min(t+2*delta-x, end)}
		case x < delta+w-sub:
			return segment{keys * low, min(t+delta+w-sub-x, end)}
		case x < delta+w:
			return segment{keys * high, min(t+delta+w-x, end)}
		default:
			return segment{0, min(t+2*w-x, end)}
		}
	case Ramp:
		// Piecewise-constant steps of 1% of the run.
		step := max(end/100, 1)
		i := t / step
		mid := (float64(i) + 0.5) / float64(end/step)
		return segment{2 * r * (1 - math.Abs(2*mid-1)), min((i+1)*step, end)}
	case JoinLeave:
		return segment{r, p.nextLifeChange(t)}
	case Startup:
		at := p.StartupAt()
		if t < at {
			return segment{0, at}
		}
		if p.Rate > 0 {
			burst, after := p.StartupRate()
			if b := at + int64(p.StartupBurst()); t < b {
				return segment{burst, min(b, end)}
			}
			r = after
		}
	}
	return segment{r, end}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Stream is one worker's sequence of checks.
type Stream struct {
	p     *Params
	inst  int
	w     int
	rng   *rand.Rand
	keys  *KeyDist
	phase int64
	t     int64
	join  int64
	leave int64
	seg   segment
	share float64 // this stream's fraction of the fleet rate in seg
	op    *opStream
	held  *Check // a check handed back by Unread
}

// NewStream returns the stream of worker w of instance inst. keys is shared
// by all streams (see NewKeyDist).
func (p *Params) NewStream(inst, w int, keys *KeyDist) *Stream {
	s := &Stream{
		p:    p,
		inst: inst,
		w:    w,
		rng:  rand.New(rand.NewPCG(p.Seed, uint64(inst)<<20|uint64(w))),
		keys: keys,
	}
	// Per-instance phase of the bursty profile: same for all its workers.
	ph := rand.New(rand.NewPCG(p.Seed^0x9e3779b97f4a7c15, uint64(inst)))
	s.phase = ph.Int64N(int64(p.Window/2) + 1)
	s.join, s.leave = p.Lifetime(inst)
	s.t = s.join
	s.seg.until = s.join // forces a segment load
	return s
}

// Check is one offered check.
type Check struct {
	At   int64 // offset from the run's start, ns
	Key  uint32
	Cost uint32
}

// Next returns the next check, or false when the stream is done. For an
// unpaced run (Params.Paced false) now is the current offset and the check
// is due at once while the profile is active.
func (s *Stream) Next(now int64) (Check, bool) {
	if c := s.held; c != nil {
		s.held = nil
		return *c, true
	}
	if IsOperation(s.p.Profile) {
		return s.opNext()
	}
	if !s.p.Paced() {
		t := max(now, s.t)
		for {
			if t >= s.leave {
				return Check{}, false
			}
			seg := s.p.total(s.inst, s.phase, t)
			if seg.rate > 0 {
				break
			}
			t = seg.until
		}
		s.t = t
		return s.check(t), true
	}
	for {
		if s.t >= s.seg.until {
			if s.t >= s.leave {
				return Check{}, false
			}
			s.seg = s.p.total(s.inst, s.phase, s.t)
			s.seg.until = min(s.seg.until, s.leave)
			n := 1
			if s.p.Profile == JoinLeave {
				n = s.p.alive(s.t)
			} else {
				n = s.p.Instances
			}
			s.share = 1 / float64(n*s.p.Workers)
			if s.p.Profile == Bursty {
				// Each instance's on phase carries its own share.
				s.share = 1 / float64(s.p.Instances*s.p.Workers)
			}
		}
		rate := s.seg.rate * s.share
		if rate <= 0 {
			s.t = s.seg.until
			continue
		}
		gap := int64(s.rng.ExpFloat64() / rate * 1e9)
		if s.t+gap >= s.seg.until {
			// Memoryless: restart from the segment's end.
			s.t = s.seg.until
			continue
		}
		s.t += gap
		return s.check(s.t), true
	}
}

// Unread hands c, the last check Next returned, back: the next call to Next
// returns it again (a worker that stops at the end of a span of service
// leaves it for the next span).
func (s *Stream) Unread(c Check) { s.held = &c }

func (s *Stream) check(t int64) Check {
	c := Check{At: t, Cost: 1}
	c.Key = s.keys.Draw(s.rng, t)
	if s.p.MaxCost > 1 {
		c.Cost = uint32(1 + s.rng.IntN(s.p.MaxCost))
	}
	return c
}

// KeyDist draws keys for a run.
type KeyDist struct {
	p    *Params
	n    int
	cdf  []float64 // nil: uniform
	life int64     // churn: key lifetime
}

// NewKeyDist returns the key distribution of p; it is safe for concurrent
// use.
func NewKeyDist(p *Params) *KeyDist {
	d := &KeyDist{p: p, n: p.Keys}
	switch p.Profile {
	case Churn:
		d.life = int64(p.Window)
		return d
	case Boundary:
		d.n = p.AttackedKeys() // every attacked key alike
		return d
	}
	if p.Zipf > 0 && d.n > 1 {
		d.cdf = make([]float64, d.n)
		sum := 0.0
		for i := range d.cdf {
			sum += math.Pow(float64(i+1), -p.Zipf)
			d.cdf[i] = sum
		}
		for i := range d.cdf {
			d.cdf[i] /= sum
		}
	}
	return d
}

// Prob returns the probability of key k under a steady distribution (the
// share of the rate key k gets), or 0 for churn.
func (d *KeyDist) Prob(k int) float64 {
	if d.life > 0 || k >= d.n {
		return 0
	}
	if d.cdf == nil {
		return 1 / float64(d.n)
	}
	if k == 0 {
		return d.cdf[0]
	}
	return d.cdf[k] - d.cdf[k-1]
}

// Draw returns a key for a check at offset t.
func (d *KeyDist) Draw(rng *rand.Rand, t int64) uint32 {
	if d.life > 0 {
		// Keys a..a+n−1 are alive, a advancing n keys per lifetime: each
		// key lives for one lifetime.
		a := int64(float64(t) / float64(d.life) * float64(d.n))
		return uint32(a + rng.Int64N(int64(d.n)))
	}
	if d.cdf == nil {
		return uint32(rng.IntN(d.n))
	}
	u := rng.Float64()
	i, _ := slices.BinarySearch(d.cdf, u)
	return uint32(min(i, d.n-1))
}

// Merged returns every check of every stream of p, sorted by time: the
// traffic a simulation replays. max bounds the count (0: no bound); the
// second result reports whether it was reached. A Throughput profile has no
// schedule to replay (its checks come as fast as the fleet takes them):
// none.
func (p *Params) Merged(max int) ([]Check, bool) {
	if p.Profile == Throughput {
		return nil, false
	}
	keys := NewKeyDist(p)
	var all []Check
	for i := range p.Instances {
		for w := range p.Workers {
			s := p.NewStream(i, w, keys)
			for {
				c, ok := s.Next(0)
				if !ok || c.At >= int64(p.Duration) {
					break
				}
				if max > 0 && len(all) >= max {
					slices.SortFunc(all, func(a, b Check) int { return cmpInt(a.At, b.At) })
					return all, true
				}
				all = append(all, c)
			}
		}
	}
	slices.SortStableFunc(all, func(a, b Check) int { return cmpInt(a.At, b.At) })
	return all, false
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
