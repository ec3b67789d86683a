package traffic

import (
	"math"
	"slices"
	"time"
)

// The operations profiles: what an operator does to a running fleet. Each
// offers a few keys on a regular schedule, half of them quiet (at most
// 0.8·L in any window, so any denial of theirs is a false denial) and half
// hot (2.2·L per window: over-admission and utilization are judged on
// them), every check costing 1, whatever -rate and -cost. They run only
// when named.
const (
	// Shift: a key's traffic moves between instances. Keys take one of
	// four patterns in turn: all at once (a quiet key's traffic hops to
	// the next instance at each of its bursts, a hot key's at a third and
	// at two thirds of the run), round robin (each check on the next
	// instance), draining (from a third to two thirds of the run, instance
	// A's share of the key falls linearly to 0 while instance B's grows to
	// all of it), and sticky (never moves: the control, whose denials are
	// not the moves').
	Shift = "shift"
	// Deploy: instances are replaced one by one while the fleet runs:
	// instance i is drained (its traffic goes to the others), closed a
	// moment later (Close pushes its last counts), and after a pause a new
	// limiter with a new InstanceID starts in its place and gets traffic.
	// Keys take one of two patterns in turn: sticky (to a home instance;
	// while it is drained or down, to the next one, and back to the new
	// one once started) and spread (round robin over the instances up).
	Deploy = "deploy"
	// Reload: every instance watches one rules file (sluice's WatchFile),
	// which is rewritten in place mid-run, every quarter second from a fifth
	// to four fifths of the run, the way a shell's > does: truncated, then
	// written in two parts, the first ending before the load test's rule.
	// The rules stay the same, but the middle rewrite changes another
	// rule's limit, which the later ones keep (the judged rule's L stays,
	// so that the oracle holds).
	// Keys' checks go round robin over the instances. Judged besides: no
	// check returns an error (ErrUnknownRule while a partial file is in
	// force).
	Reload = "reload"
	// StoreLoss: the store loses its state mid-run: FLUSHALL at 30 % of
	// the run, and again every fifth of it (at least a window and a
	// sub-window apart) until 80 %. Keys' checks go round robin over the
	// instances.
	StoreLoss = "store-loss"
)

// Operations lists the operations profiles, in the order "-profile ops"
// runs them. They are not in the default run.
var Operations = []string{Shift, Deploy, Reload, StoreLoss}

// IsOperation reports whether p is an operations profile.
func IsOperation(p string) bool { return slices.Contains(Operations, p) }

// MinInstances returns the fewest instances a profile needs: 2 for the
// profiles that move traffic between instances, else 1.
func MinInstances(p string) int {
	if p == Shift || p == Deploy {
		return 2
	}
	return 1
}

// Shares of the limit per window offered to the operations profiles' keys:
// a hot key is offered HotShare·L per window, evenly; a quiet key
// QuietShare·L per window, evenly, but in the shift profile, and a deploy's
// sticky quiet keys, in cycles of 1.4 windows: LowShare·L within LowSpan of
// a window, then BurstShare·L within the next BurstSpan, then nothing (at
// most 0.8·L in any window, and in any window plus a sub-window of a tenth
// of the window): the key uses part of its limit on one instance, then
// arrives in force, on another instance if it moved (a shift's all-at-once
// key moves at each burst; a deploy's sticky key bursts as its home
// instance is drained).
const (
	QuietShare = 0.8
	HotShare   = 2.2
	LowShare   = 0.3
	LowSpan    = 0.1
	BurstShare = 0.5
	BurstSpan  = 0.1
)

// patterns returns how many traffic patterns an operations profile's keys
// take in turn.
func (p *Params) patterns() int {
	switch p.Profile {
	case Shift:
		return 4
	case Deploy:
		return 2
	}
	return 1
}

// OpKeys returns the default number of keys of an operations profile:
// every pattern once quiet and once hot, and at least 4.
func OpKeys(profile string) int {
	p := Params{Profile: profile}
	return max(4, 2*p.patterns())
}

// Pattern names key k's traffic pattern in an operations profile, and
// whether it is quiet or hot: "all at once, quiet".
func (p *Params) Pattern(k int) string {
	kind := "hot"
	if p.Quiet(k) {
		kind = "quiet"
	}
	switch p.Profile {
	case Shift:
		return []string{"all at once", "round robin", "draining", "sticky"}[k%4] + ", " + kind
	case Deploy:
		return []string{"sticky", "spread"}[k%2] + ", " + kind
	}
	return "round robin, " + kind
}

// Quiet reports whether key k of an operations profile is a quiet one.
func (p *Params) Quiet(k int) bool { return (k/p.patterns())%2 == 0 }

// keySched is one key's schedule in an operations profile: its checks at
// phase + j·gap, or in cycles (low checks gap apart, then from at on burst
// checks burstGap apart, a cycle every cycle ns).
type keySched struct {
	phase, gap          float64
	low, burst          int
	burstGap, cycle, at float64 // at: a burst's offset in its cycle
}

// t returns the offset of the key's check j.
func (k *keySched) t(j int) float64 {
	if k.low == 0 {
		return k.phase + float64(j)*k.gap
	}
	n := k.low + k.burst
	c, r := j/n, j%n
	base := k.phase + float64(c)*k.cycle
	if r < k.low {
		return base + float64(r)*k.gap
	}
	return base + k.at + float64(r-k.low)*k.burstGap
}

// perWindow returns the key's checks per window on average.
func (k *keySched) perWindow(w float64) float64 {
	if k.low == 0 {
		return w / k.gap
	}
	return float64(k.low+k.burst) * w / k.cycle
}

// bursts returns how many of the key's bursts have begun by offset t.
func (k *keySched) bursts(t float64) int {
	if k.low == 0 || t < k.phase+k.at {
		return 0
	}
	return int((t-k.phase-k.at)/k.cycle) + 1
}

// sched returns key k's schedule.
func (p *Params) sched(k int) keySched {
	w, l := float64(p.Window), float64(p.Limit)
	u := float64(mix(p.Seed, uint64(k), 0)>>11) / (1 << 53)
	cycled := p.Profile == Shift || (p.Profile == Deploy && k%2 == 0)
	if !p.Quiet(k) || !cycled {
		share := HotShare
		if p.Quiet(k) {
			share = QuietShare
		}
		gap := w / (share * l)
		return keySched{phase: u * gap, gap: gap}
	}
	low := max(int(LowShare*l), 1)
	burst := max(int(BurstShare*l), 1)
	cycle := (LowSpan + BurstSpan + 1.2) * w // at least a window and a sub-window of nothing
	ks := keySched{phase: u * cycle, gap: LowSpan * w / float64(low), low: low, burst: burst,
		burstGap: BurstSpan * w / float64(burst), cycle: cycle, at: LowSpan * w}
	if drain, _, ok := p.drained(k % p.Instances); ok {
		// A deploy's sticky key bursts as its home is drained: it used
		// part of its limit there, and arrives in force on the next.
		at := float64(drain) - ks.at
		ks.phase = at - math.Floor(at/cycle)*cycle
	}
	return ks
}

// OpRate returns the fleet-wide rate an operations profile offers, checks/s.
func (p *Params) OpRate() float64 {
	r := 0.0
	for k := range p.Keys {
		s := p.sched(k)
		r += s.perWindow(float64(p.Window)) / p.Window.Seconds()
	}
	return r
}

// mix hashes (seed, a, b) to 64 well-spread bits (splitmix64's finalizer).
func mix(seed, a, b uint64) uint64 {
	z := seed ^ a*0x9e3779b97f4a7c15 ^ b*0xbf58476d1ce4e5b9
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Downtime returns when instance i of a deploy is closed and when its
// replacement starts, as offsets; ok is false for other profiles. The
// instances are replaced in turn, each in its own slot of 0.7·D/N from
// 0.15·D on: drained at the slot's start (its traffic goes to the others),
// closed DrainLead later, and replaced half a slot after the start.
func (p *Params) Downtime(i int) (down, up int64, ok bool) {
	drain, up, ok := p.drained(i)
	return drain + p.DrainLead(), up, ok
}

// DrainLead is how long a deploy's instance runs without traffic before it
// is closed, as a load balancer drains it: half a window, at most a
// quarter of its slot.
func (p *Params) DrainLead() int64 {
	slot := 0.7 * float64(p.Duration) / float64(p.Instances)
	return min(int64(p.Window)/2, int64(slot/4))
}

// drained returns when instance i of a deploy stops getting traffic and
// when its replacement starts.
func (p *Params) drained(i int) (from, to int64, ok bool) {
	if p.Profile != Deploy {
		return 0, 0, false
	}
	d := float64(p.Duration)
	slot := 0.7 * d / float64(p.Instances)
	from = int64(0.15*d + float64(i)*slot)
	return from, from + int64(slot/2), true
}

// Span is an interval of offsets [From, To).
type Span struct{ From, To int64 }

// Serving returns the spans in which instance i serves traffic: from its
// join to its leave, less a deploy's downtime (its replacement serves the
// second span).
func (p *Params) Serving(i int) []Span {
	join, leave := p.Lifetime(i)
	if down, up, ok := p.Downtime(i); ok {
		return []Span{{join, down}, {up, leave}}
	}
	return []Span{{join, leave}}
}

// isDown reports whether instance i gets no traffic at offset t: a
// deploy's instance from its drain until its replacement starts.
func (p *Params) isDown(i int, t int64) bool {
	from, to, ok := p.drained(i)
	return ok && t >= from && t < to
}

// ReloadTimes returns the offsets at which the reload profile rewrites the
// rules file: every quarter second (a tenth of the run for short runs, but
// at least 100 ms apart: the hooks that rewrite run on a 100 ms tick) from
// a fifth to four fifths of the run.
func (p *Params) ReloadTimes() []int64 {
	if p.Profile != Reload {
		return nil
	}
	d := int64(p.Duration)
	step := max(min(int64(250*time.Millisecond), d/10), int64(100*time.Millisecond))
	var ts []int64
	for t := d / 5; t < d*4/5; t += step {
		ts = append(ts, t)
	}
	return ts
}

// StoreLossTimes returns the offsets at which the store-loss profile
// flushes the store: from 30 % of the run on, every fifth of the run but
// at least a window and a sub-window apart (each loss judged on its own),
// until 80 %; at least once.
func (p *Params) StoreLossTimes() []int64 {
	if p.Profile != StoreLoss {
		return nil
	}
	d := int64(p.Duration)
	step := max(d/5, int64(p.Window+p.Sub))
	ts := []int64{d * 3 / 10}
	for t := ts[0] + step; t < d*4/5; t += step {
		ts = append(ts, t)
	}
	return ts
}

// owner returns the instance and worker that make check j of key k, at
// offset t.
func (p *Params) owner(k, j int, t int64) (inst, worker int) {
	n := p.Instances
	h := mix(p.Seed, uint64(k), uint64(j))
	worker = int(h>>32) % p.Workers
	d := int64(p.Duration)
	switch p.Profile {
	case Shift:
		switch k % 4 {
		case 0: // all at once: a quiet key hops at each burst, a hot key
			// at a third and at two thirds of the run
			if s := p.sched(k); s.low > 0 {
				return (k + s.bursts(float64(t))) % n, worker
			}
			return (k + int(min(3*t/d, 2))) % n, worker
		case 1: // round robin
			return (k + j) % n, worker
		case 3: // sticky: the control, never moves
			return k % n, worker
		default: // draining: A into B from a third to two thirds
			a, b := k%n, (k+1)%n
			frac := math.Min(math.Max(float64(3*t-d)/float64(d), 0), 1)
			if float64(uint32(h))/(1<<32) < frac {
				return b, worker
			}
			return a, worker
		}
	case Deploy:
		if k%2 == 0 { // sticky, to the next instance while home is down
			home := k % n
			if p.isDown(home, t) {
				home = (home + 1) % n
			}
			return home, worker
		}
		// Spread over the instances up: at most one is down at a time.
		up := n
		skip := -1
		for i := range n {
			if p.isDown(i, t) {
				up, skip = n-1, i
				break
			}
		}
		i := (k + j) % up
		if skip >= 0 && i >= skip {
			i++
		}
		return i, worker
	}
	return (k + j) % n, worker
}

// opStream is the state of an operations profile's stream: every key's next
// check, of which the stream keeps its own.
type opStream struct {
	next  []int      // per key, the index of its next check
	sched []keySched // per key, its schedule
}

// opNext returns stream s's next check of an operations profile: the next
// check of any key, in time order, whose owner is s's instance and worker.
func (s *Stream) opNext() (Check, bool) {
	p := s.p
	if s.op == nil {
		s.op = &opStream{next: make([]int, p.Keys), sched: make([]keySched, p.Keys)}
		for k := range p.Keys {
			s.op.sched[k] = p.sched(k)
		}
	}
	for {
		best, bt := -1, math.Inf(1)
		for k, j := range s.op.next {
			if t := s.op.sched[k].t(j); t < bt {
				best, bt = k, t
			}
		}
		t := int64(bt)
		if best < 0 || t >= s.leave {
			return Check{}, false
		}
		j := s.op.next[best]
		s.op.next[best]++
		if t < s.join {
			continue
		}
		if inst, w := p.owner(best, j, t); inst == s.inst && w == s.w {
			return Check{At: t, Key: uint32(best), Cost: 1}, true
		}
	}
}
