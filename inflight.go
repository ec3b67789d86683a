package sluice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/keyname"
	"github.com/sluicehq/sluice/policy"
)

// inflightShards is the number of locks a rule's local counts are split
// over: acquires of different keys rarely share one.
const inflightShards = 64

// MinInFlightTTL is the shortest lease of a fleet-wide in-flight slot: the
// lease is max(3·SyncInterval, MinInFlightTTL), renewed every third of it
// while the slot is held. A slot whose holder died comes back to the fleet
// when its lease lapses.
const MinInFlightTTL = time.Second

// Slot is one in-flight slot taken by Acquire. Release gives it back. The
// zero Slot (from a denial or an error) holds nothing: its Release does
// nothing.
type Slot struct {
	h   *holder
	gen uint64
}

// Acquire takes one in-flight slot for key under the named rule, a
// policy.Rule with InFlight set: at most its Limit slots are held at once
// per key. It does not wait: when every slot is taken the Decision is a
// denial (Allowed false, a nil error, RetryAfter 0: a slot frees when a
// holder releases it, which cannot be foreseen). An admitted Slot must be
// released exactly once, best in a defer; more Releases, and Releases
// after Close, are harmless.
//
// A Local rule (or any InFlight rule of a limiter without a store) counts
// in this process: a lock of one of 64 shards and a map update, no
// allocation, no I/O.
//
// A fleet rule (ModeDefault or Strict, with a store) is decided in the
// store on every Acquire, in one round trip bounded by Options.Timeout and
// ctx: each slot is a lease in a sorted set per key, which the limiter
// renews in the background while the slot is held (every third of the
// lease, all the slots it holds in pipelines of Options.BatchSize keys).
// There is no local allowance: while the store answers, the fleet holds at
// most Limit per key. A slot whose instance died without releasing it (or
// was cut off from the store longer than a lease) comes back when its
// lease lapses, within max(3·SyncInterval, MinInFlightTTL). Close stops the
// renewals and releases nothing. Release removes the lease in one round
// trip. While the store is down (or does not answer within
// Options.Timeout) Acquire is decided by Options.FailureMode: [policy.FailLocal]
// admits up to ⌊Limit/N̂⌋ slots per key on this instance (counting those it
// already holds), [policy.FailOpen] admits every Acquire, [policy.FailClosed] denies with an
// error wrapping ErrStoreUnavailable. Slots admitted that way are added to
// the store by the next renewal once it answers, so that the fleet counts
// them until they are released.
//
// The error is non-nil when no slot could be taken: an unknown rule (or a
// rule that is not InFlight), a key longer than Options.MaxKeyLength, a
// closed limiter, ctx done before the store answered, or [policy.FailClosed]. A nil
// ctx is context.Background.
func (l *Limiter) Acquire(ctx context.Context, rule, key string) (Slot, Decision, error) {
	r := l.inf.rule(rule)
	switch {
	case r == nil:
		if l.rule(rule) != nil {
			return Slot{}, Decision{}, fmt.Errorf("%w %q: it is a rate rule; Acquire takes a rule with InFlight set (use Allow for rates)", ErrUnknownRule, rule)
		}
		return Slot{}, Decision{}, fmt.Errorf("%w %q", ErrUnknownRule, rule)
	case len(key) > l.opts.MaxKeyLength:
		r.counts.Check(engine.OutcomeError)
		return Slot{}, Decision{Limit: r.limit.Load()}, fmt.Errorf("%w: %d bytes, the maximum is %d", ErrKeyTooLong, len(key), l.opts.MaxKeyLength)
	case l.closed.Load():
		r.counts.Check(engine.OutcomeError)
		return Slot{}, Decision{Limit: r.limit.Load()}, ErrClosed
	}
	limit := r.limit.Load()
	if !r.fleet {
		n, ok := r.take(key, limit)
		r.counts.Check(engine.OutcomeOf(ok, nil))
		if !ok {
			return Slot{}, Decision{Limit: limit}, nil
		}
		return l.inf.slot(r, key, "", ""), Decision{Allowed: true, Limit: limit, Remaining: limit - n}, nil
	}
	s, d, fallback, err := l.inf.acquireFleet(ctx, r, key, limit)
	if r.counts != nil {
		p := engine.PathStrict
		if fallback {
			p = engine.PathFallback
		}
		o := engine.OutcomeOf(d.Allowed, err)
		r.counts.Add(p, o)
		r.counts.Check(o)
	}
	return s, d, err
}

// Release gives the slot back. It is idempotent (a second Release, of the
// Slot or of a copy, does nothing), safe after Close, and never blocks
// longer than Options.Timeout (a fleet slot's lease is removed in one round
// trip; if that fails, the next renewal removes it, and else the lease
// lapses on its own).
func (s Slot) Release() {
	h := s.h
	if h == nil || !h.gen.CompareAndSwap(s.gen, s.gen+1) {
		return
	}
	f, r, key, zkey, member := h.inf, h.r, h.key, h.zkey, h.member
	if member != "" {
		f.unhold(h, zkey, member) // before the holder can be reused
	}
	h.r, h.key, h.zkey, h.member = nil, "", "", ""
	f.pool.Put(h)
	r.give(key)
	if member != "" {
		f.releaseFleet(zkey, member)
	}
}

// Held reports whether the slot is held: admitted and not yet released.
func (s Slot) Held() bool { return s.h != nil && s.h.gen.Load() == s.gen }

// inflight holds a limiter's InFlight rules and the leases of the slots it
// holds across the fleet.
type inflight struct {
	l     *Limiter
	rules atomic.Pointer[map[string]*inflightRule]
	seed  maphash.Seed
	pool  sync.Pool // *holder
	ttl   time.Duration
	seq   atomic.Uint64
	who   string // a lease's member is who + seq: the InstanceID and a random tag

	mu       sync.Mutex
	held     map[*holder]lease // fleet slots held: renewed every ttl/3
	gone     []lease           // leases to remove at the next renewal
	late     []lease           // leases to remove again at the next full renewal
	renewing int               // renewals in flight: leases released meanwhile go to gone too
	kick     chan struct{}     // asks the renewal loop to remove gone now
	// The renewal loop runs while the limiter may run it (it has a
	// store and is not closed) and has leases to look after: fleet rules,
	// or leases held or queued for removal (a rule that left keeps its
	// slots until they are released).
	mayLoop, looping, fleetRules bool
}

// lease is one slot's member in the store.
type lease struct{ zkey, member string }

// inflightRule is one InFlight rule: its limit and the slots held in this
// process, per key.
type inflightRule struct {
	name   string
	limit  atomic.Int64
	counts *engine.Counts // the Acquires by outcome and path; nil without telemetry
	fleet  bool           // held in the store
	zkey   string         // the store key's start: Prefix:inflight:{name:
	seed   maphash.Seed
	shards [inflightShards]inflightShard
}

// inflightShard is a lock and the slots held per key of the keys that hash
// to it. A key is deleted when its last slot is released.
type inflightShard struct {
	mu   sync.Mutex
	held map[string]int64
	_    [48]byte // a cache line each
}

// holder is the state behind a Slot. Release bumps gen, so that copies of
// the Slot are spent too, and then recycles the holder.
type holder struct {
	gen          atomic.Uint64
	inf          *inflight
	r            *inflightRule
	key          string
	zkey, member string // a fleet slot's lease; empty for a local slot
}

// splitInFlight takes the InFlight rules out of rules, validated, with
// their modes resolved (ModeDefault is fleet-wide with a store, Local
// without), and refuses names used twice across both kinds. fleet reports
// whether one of them needs the store.
func splitInFlight(rules []policy.Rule, store bool) (rates, inflight []policy.Rule, fleet bool, err error) {
	names := make(map[string]bool, len(rules))
	for _, pr := range rules {
		if names[pr.Name] && pr.Name != "" {
			return nil, nil, false, fmt.Errorf("%w %q: duplicate rule name: every rule needs a unique name", policy.ErrInvalidRule, pr.Name)
		}
		names[pr.Name] = true
		if !pr.InFlight {
			rates = append(rates, pr)
			continue
		}
		if err := pr.Validate(); err != nil {
			return nil, nil, false, err
		}
		switch {
		case pr.Mode == policy.ModeDefault && store:
			pr.Mode = policy.Strict
		case pr.Mode == policy.ModeDefault:
			pr.Mode = policy.Local
		case pr.Mode == policy.Strict && !store:
			return nil, nil, false, fmt.Errorf("%w %q: Mode %v needs a store: set Options.Redis, or use policy.Local", policy.ErrInvalidRule, pr.Name, pr.Mode)
		}
		fleet = fleet || pr.Mode == policy.Strict
		inflight = append(inflight, pr)
	}
	return rates, inflight, fleet, nil
}

// newInflight returns the in-flight state of l, with rules (from
// splitInFlight).
func newInflight(l *Limiter, rules []policy.Rule) *inflight {
	f := &inflight{
		l:    l,
		seed: maphash.MakeSeed(),
		ttl:  max(3*l.opts.SyncInterval, MinInFlightTTL),
		held: map[*holder]lease{},
		kick: make(chan struct{}, 1),
	}
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	// The tag keeps the leases of a limiter apart from those of another
	// with the same InstanceID (a restart, before its leases lapse).
	f.who = l.opts.InstanceID + ":" + hex.EncodeToString(tag[:]) + ":"
	f.pool.New = func() any { return &holder{inf: f} }
	f.setRules(rules)
	return f
}

// setRules replaces the rules. A rule whose name and mode are unchanged
// keeps its slots (a new Limit applies to the next Acquire); the others
// start empty. Slots of a rule that left are still released as usual.
func (f *inflight) setRules(rules []policy.Rule) {
	old := f.rules.Load()
	next := make(map[string]*inflightRule, len(rules))
	anyFleet := false
	for _, pr := range rules {
		fleet := pr.Mode == policy.Strict
		anyFleet = anyFleet || fleet
		if old != nil {
			if r := (*old)[pr.Name]; r != nil && r.fleet == fleet {
				r.limit.Store(pr.Limit)
				next[pr.Name] = r
				continue
			}
		}
		r := &inflightRule{
			name:   pr.Name,
			counts: f.l.tel.addInflight(pr.Name),
			fleet:  fleet,
			zkey:   keyname.InFlightTag(f.l.opts.Prefix, pr.Name),
			seed:   f.seed,
		}
		r.limit.Store(pr.Limit)
		next[pr.Name] = r
	}
	f.rules.Store(&next)
	f.mu.Lock()
	f.fleetRules = anyFleet
	f.loop()
	stop := f.looping && !anyFleet
	f.mu.Unlock()
	if stop {
		f.poke() // the loop sees whether it has anything left to do
	}
}

// rule returns the InFlight rule named name, or nil.
func (f *inflight) rule(name string) *inflightRule {
	return (*f.rules.Load())[name]
}

// shard returns the shard of key.
func (r *inflightRule) shard(key string) *inflightShard {
	return &r.shards[maphash.String(r.seed, key)%inflightShards]
}

// take counts one more slot held for key if fewer than limit are, and
// returns the count with it.
func (r *inflightRule) take(key string, limit int64) (int64, bool) {
	s := r.shard(key)
	s.mu.Lock()
	n := s.held[key]
	if n >= limit {
		s.mu.Unlock()
		return n, false
	}
	if s.held == nil {
		s.held = map[string]int64{}
	}
	s.held[key] = n + 1
	s.mu.Unlock()
	return n + 1, true
}

// add counts one more slot held for key, whatever the count.
func (r *inflightRule) add(key string) { r.take(key, policy.MaxLimit+1) }

// give counts one slot less for key.
func (r *inflightRule) give(key string) {
	s := r.shard(key)
	s.mu.Lock()
	if n := s.held[key]; n > 1 {
		s.held[key] = n - 1
	} else {
		delete(s.held, key)
	}
	s.mu.Unlock()
}

// heldAll returns the slots of the rule this process holds, across keys:
// every shard's lock in turn (the metrics, when collected).
func (r *inflightRule) heldAll() int64 {
	var n int64
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		for _, c := range s.held {
			n += c
		}
		s.mu.Unlock()
	}
	return n
}

// heldLocal returns the slots of key this process holds (tests).
func (r *inflightRule) heldLocal(key string) int64 {
	s := r.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[key]
}

// slot returns a Slot held for key (already counted), with its lease in
// the store if member is not empty.
func (f *inflight) slot(r *inflightRule, key, zkey, member string) Slot {
	h := f.pool.Get().(*holder)
	h.r, h.key, h.zkey, h.member = r, key, zkey, member
	if member != "" {
		f.mu.Lock()
		f.held[h] = lease{zkey, member}
		f.loop() // its rule may have left meanwhile
		f.mu.Unlock()
	}
	return Slot{h: h, gen: h.gen.Load()}
}

// acquireScript removes the key's lapsed leases, then adds one if fewer
// than the limit are held. KEYS[1] the key's sorted set; ARGV: now and the
// lease's end (ms, store time), the limit, the member, the set's TTL (ms).
// It returns {admitted (0 or 1), leases held}.
var acquireScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local n = redis.call('ZCARD', KEYS[1])
if n >= tonumber(ARGV[3]) then
  return {0, n}
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {1, n + 1}
`)

// acquireFleet takes a fleet slot in the store, or by the failure mode
// (fallback true).
func (f *inflight) acquireFleet(ctx context.Context, r *inflightRule, key string, limit int64) (_ Slot, _ Decision, fallback bool, _ error) {
	l := f.l
	if ctx == nil {
		ctx = context.Background()
	}
	zkey := string(keyname.Encode([]byte(r.zkey), key)) + "}"
	member := f.member()
	if l.degraded.Load() {
		return f.fallback(r, key, limit, zkey, member, errors.New("store unreachable"))
	}
	if err := ctx.Err(); err != nil {
		return Slot{}, Decision{Limit: limit}, false, err
	}
	now := l.now() / int64(time.Millisecond)
	tctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	res, err := acquireScript.Run(tctx, l.opts.Redis, []string{zkey},
		now, now+f.ttl.Milliseconds(), limit, member, f.keyTTL()).Int64Slice()
	cancel()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		f.forget(zkey, member) // the script may have run
		if ctx.Err() != nil {
			return Slot{}, Decision{Limit: limit}, false, ctx.Err()
		}
		// A fresh lease: the one the script may hold is being removed.
		member = f.member()
		return f.fallback(r, key, limit, zkey, member, err)
	}
	if res[0] == 0 {
		return Slot{}, Decision{Limit: limit}, false, nil
	}
	r.add(key)
	return f.slot(r, key, zkey, member), Decision{Allowed: true, Limit: limit, Remaining: max(limit-res[1], 0)}, false, nil
}

// fallback decides an Acquire the store could not: by the failure mode.
// An admitted slot gets a lease that the next renewal adds to the store.
func (f *inflight) fallback(r *inflightRule, key string, limit int64, zkey, member string, cause error) (Slot, Decision, bool, error) {
	l := f.l
	d := Decision{Allowed: true, Limit: limit}
	switch l.opts.FailureMode {
	case policy.FailClosed:
		return Slot{}, Decision{Limit: limit}, true, fmt.Errorf("%w: in-flight rule %q: %w", ErrStoreUnavailable, r.name, cause)
	case policy.FailOpen:
		r.add(key)
	default:
		share := limit / max(l.nhat.Load(), 1)
		n, ok := r.take(key, share)
		if !ok {
			return Slot{}, Decision{Limit: limit}, true, nil
		}
		d.Remaining = share - n
	}
	return f.slot(r, key, zkey, member), d, true, nil
}

// member returns a new lease's member in the store.
func (f *inflight) member() string {
	return f.who + strconv.FormatUint(f.seq.Add(1), 10)
}

// keyTTL is the TTL of a key's sorted set, in ms: past its last lease.
func (f *inflight) keyTTL() int64 { return (f.ttl + time.Second).Milliseconds() }

// maxGone bounds the leases queued for removal: past it (a store down for
// long) the rest are left to lapse on their own, within a lease.
const maxGone = 1 << 16

// forget queues a lease for removal, and asks the renewal loop to remove
// it now: an Acquire cancelled while the store decided it may hold a slot
// nobody will release.
//
// The lease is removed twice: at once, and again at the next full renewal,
// in case the store ran the script after the first removal (the cancelled
// call and the removal come on different connections, which the store
// may serve in either order).
func (f *inflight) forget(zkey, member string) {
	f.mu.Lock()
	f.queue(lease{zkey, member})
	if len(f.late) < maxGone {
		f.late = append(f.late, lease{zkey, member})
	}
	f.loop()
	f.mu.Unlock()
	f.poke()
}

// poke asks the renewal loop, if it runs, to remove the leases queued now.
func (f *inflight) poke() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// queue adds a lease to remove (f.mu held).
func (f *inflight) queue(x lease) {
	if len(f.gone) < maxGone {
		f.gone = append(f.gone, x)
	}
}

// unhold stops renewing a released slot's lease.
func (f *inflight) unhold(h *holder, zkey, member string) {
	f.mu.Lock()
	delete(f.held, h)
	if f.renewing > 0 {
		// The renewal in flight may add it back: remove it again after.
		f.queue(lease{zkey, member})
	}
	f.mu.Unlock()
}

// releaseFleet removes a released slot's lease from the store: at once
// while the store is healthy, else at the next renewal that reaches it.
func (f *inflight) releaseFleet(zkey, member string) {
	if f.l.degraded.Load() {
		f.forget(zkey, member)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.l.opts.Timeout)
	defer cancel()
	if err := f.l.opts.Redis.ZRem(ctx, zkey, member).Err(); err != nil {
		f.forget(zkey, member)
	}
}

// renewLoop renews the leases of the slots held, every third of a lease,
// until Close, or until the limiter has no fleet rule left and no lease to
// renew or remove. Close stops it without releasing anything: slots still
// held lapse in the store within a lease.
func (f *inflight) renewLoop() {
	l := f.l
	defer l.wg.Done()
	t := time.NewTicker(f.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			f.mu.Lock()
			f.looping = false
			f.mu.Unlock()
			return
		case <-f.kick:
			if !l.degraded.Load() {
				_ = f.renew(false) // what fails is queued again
			}
		case <-t.C:
			_ = f.renew(true) // what fails is queued again; the store's health is the syncer's
		}
		f.mu.Lock()
		idle := f.idle() && f.renewing == 0
		if idle {
			f.looping = false
		}
		f.mu.Unlock()
		if idle {
			return
		}
	}
}

// idle reports that the renewal loop has nothing to look after: no fleet
// rule, no lease held, none to remove (f.mu held).
func (f *inflight) idle() bool {
	return !f.fleetRules && len(f.held) == 0 && len(f.gone) == 0 && len(f.late) == 0
}

// loop starts the renewal loop if it may run, does not, and has leases to
// look after (f.mu held).
func (f *inflight) loop() {
	if !f.mayLoop || f.looping || f.idle() {
		return
	}
	f.looping = true
	f.l.wg.Add(1)
	go f.renewLoop()
}

// running reports whether the renewal loop runs (tests).
func (f *inflight) running() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.looping
}

// renew extends every held lease by a TTL (adding those the store does not
// hold: admitted by the failure mode, or lapsed), if all, and removes the
// leases queued for removal, in pipelines of at most Options.BatchSize
// keys. It returns the store's error.
func (f *inflight) renew(all bool) error {
	l := f.l
	f.mu.Lock()
	byKey := map[string][]lease{}
	for _, ls := range f.held {
		if !all {
			break
		}
		byKey[ls.zkey] = append(byKey[ls.zkey], ls)
	}
	gone := f.gone
	f.gone = nil
	if all {
		gone = append(gone, f.late...)
		f.late = nil
	}
	f.renewing++
	f.mu.Unlock()
	// Pipelines of at most BatchSize keys, as the syncer sends.
	batch := l.opts.BatchSize
	if batch == 0 {
		batch = 256
	}
	end := (l.now()/int64(time.Millisecond) + f.ttl.Milliseconds())
	var err error
	var p redis.Pipeliner
	n := 0
	send := func() {
		if n == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(l.opts.Timeout, f.ttl/3))
		if _, e := p.Exec(ctx); e != nil && err == nil {
			err = fmt.Errorf("sluice: renewing in-flight leases: %w", e)
		}
		cancel()
		n = 0
	}
	add := func(cmd func(p redis.Pipeliner)) {
		if n == 0 {
			p = l.opts.Redis.Pipeline()
		}
		cmd(p)
		if n++; n == batch {
			send()
		}
	}
	ctx := context.Background() // each Exec has its deadline
	for zkey, ls := range byKey {
		zs := make([]redis.Z, len(ls))
		for i, x := range ls {
			zs[i] = redis.Z{Score: float64(end), Member: x.member}
		}
		add(func(p redis.Pipeliner) {
			p.ZAdd(ctx, zkey, zs...)
			p.PExpire(ctx, zkey, time.Duration(f.keyTTL())*time.Millisecond)
		})
	}
	for _, x := range gone {
		add(func(p redis.Pipeliner) { p.ZRem(ctx, x.zkey, x.member) })
	}
	send()
	f.mu.Lock()
	f.renewing--
	if err != nil {
		for _, x := range gone {
			f.queue(x)
		}
	}
	// Slots released while this renewal was in flight, which it may have
	// added back (unhold): removed at once by the loop, not a third of a
	// lease later.
	again := err == nil && f.renewing == 0 && len(f.gone) > 0
	f.mu.Unlock()
	if again {
		f.poke()
	}
	return err
}

// startRenewal lets the renewal of fleet leases run, with a store, and
// starts it if the limiter has fleet rules.
func (f *inflight) startRenewal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mayLoop = f.l.sync != nil
	f.loop()
}

// shut keeps the renewal loop from starting again: Close, before it waits
// for the limiter's goroutines.
func (f *inflight) shut() {
	f.mu.Lock()
	f.mayLoop = false
	f.mu.Unlock()
}
