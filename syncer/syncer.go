// Package syncer pushes an instance's increments to Redis and pulls merged totals back, one atomic step per key, batched in pipelines; it also runs the live-instance registry and store-clock offset.
//
// # Protocol
//
// Every limiter key is one Redis hash (see KeyName) whose fields are bucket
// indices. Once a SyncInterval, and at once when a check asks for it (urgent
// syncs), the syncer drains the keys admitted to since its last pass and sends,
// per key, one call of a Lua script that adds this instance's unacknowledged
// counts, decides any reservations (checks that had to be decided by the
// store), and returns the window's totals: push and pull in one atomic step.
// Calls travel in pipelines of Config.Batch keys; a cluster client splits them
// by node. On a standalone store the keys that only push and pull take the
// bulk path instead (bulk.go): one script call per pipeline adds every key's
// counts, and an HMGET per key pulls its window.
//
// Pushes are retry-safe. Each call carries a sequence number, increasing per
// instance; the script records the last one applied per instance and key, and
// skips a batch it has seen. A call whose reply is lost is resent as is, with
// its old sequence number, until a reply arrives: its counts are applied
// exactly once whether or not the first send got through. Counts stay in the
// local cache's pend (and count against the instance's divergence cap) until a
// reply acknowledges them.
//
// Reservations are checks handed to the store: the script admits each if the
// window's estimate has room. A caller that gets no answer (the timeout, or the
// store failing) decides by its failure mode and counts what it admits
// locally, to be pushed like any other count; if the store did admit the
// reservation after all (the reply was lost or came late), the syncer pushes a
// negative correction, so the store ends up counting each admission once.
//
// # Registry and clock
//
// At the start of every cycle the instance heartbeats into a sorted set whose
// scores are expiry times; the set's size is N̂, the live-instance estimate,
// and the store's TIME in the same reply refreshes the offset between the local
// clock and the store clock. A failed heartbeat marks the store unhealthy: the
// cycle stops there, and counts stay pending until a later heartbeat succeeds.
package syncer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/window"
)

// Errors returned by Reserve.
var (
	// ErrUnavailable means the store could not be reached, or is marked
	// unhealthy.
	ErrUnavailable = errors.New("syncer: store unavailable")
	// ErrTimeout means the store did not answer within the timeout.
	ErrTimeout = errors.New("syncer: store did not answer in time")
	// ErrClosed means the syncer was closed.
	ErrClosed = errors.New("syncer: closed")
)

// Config configures a Syncer.
type Config struct {
	// Client is the store; required.
	Client redis.UniversalClient
	// Prefix starts every Redis key; required.
	Prefix string
	// InstanceID names this instance in the registry and in retry
	// bookkeeping; required, unique per process.
	InstanceID string
	// Interval is the sync period; required.
	Interval time.Duration
	// Timeout bounds how long Reserve waits; required.
	Timeout time.Duration
	// OpTimeout bounds one pipeline round trip; default max(1s, 2·Interval).
	OpTimeout time.Duration
	// Batch is the number of keys per pipeline; default 256.
	Batch int
	// InstanceTTL is how long a silent instance stays in the registry;
	// default max(3s, 10·Interval).
	InstanceTTL time.Duration
	// LocalNow returns the local clock in ns; required.
	LocalNow func() int64
	// OnInstances is called with N̂ after every heartbeat.
	OnInstances func(n int)
	// OnHealth is called when the store's health changes (err is nil when it
	// becomes healthy).
	OnHealth func(healthy bool, err error)

	// perKey forces the per-key path on a standalone store (tests).
	perKey bool
}

// Rule is what the syncer needs of one rule.
type Rule struct {
	Name     string
	Table    *localcache.Table
	Geometry window.Sliding
	Limit    int64

	prefix string // "<prefix>:{<name>:"
	suffix string // "}:<sub µs>"
	ttlMs  int64
	subUs  int64
	span   int
}

// Result is the store's decision on a reservation.
type Result struct {
	Admitted   bool
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
}

// Stats are counters since New.
type Stats struct {
	Cycles        int64         // full sync cycles run
	UrgentCycles  int64         // out-of-cycle syncs run for reservations
	KeySyncs      int64         // keys pushed and pulled (per-key calls and bulk-path keys answered)
	Reservations  int64         // reservations decided by the store
	RoundTrips    int64         // pipelines and single calls sent
	Commands      int64         // commands sent (script calls, bulk-path HMGETs and heartbeats)
	Failures      int64         // round trips that failed
	Corrections   int64         // correction counts pushed
	Retried       int64         // batches resent after an ambiguous failure
	LastCycle     time.Duration // duration of the last full cycle
	LastCycleKeys int64         // keys synced in the last full cycle
	Instances     int64         // N̂ at the last heartbeat
	Offset        time.Duration // store clock minus local clock
	Healthy       bool
}

// Syncer is the background sync of one limiter. Its methods are safe for
// concurrent use.
type Syncer struct {
	cfg   Config
	rules []*Rule
	byTab map[*localcache.Table]*Rule
	reg   string // registry key

	offset    atomic.Int64
	instances atomic.Int64
	healthy   atomic.Bool
	closed    atomic.Bool
	running   atomic.Bool

	mu     sync.Mutex
	urgent []*waiter

	wake     chan struct{}
	flushReq chan chan error
	done     chan struct{}
	stopped  chan struct{}
	start    sync.Once
	// life is the context of the loop's store round trips; Close cancels it
	// when its own context ends, so that a round trip to a hung store does
	// not hold Close for as long as the client keeps retrying.
	life context.Context
	kill context.CancelFunc

	// bulk is true on a standalone store: keys that only push and pull take
	// the bulk path (see bulk.go). markers are the instance's bulk sequence
	// key, kept markerTTL ms.
	bulk      bool
	markers   [bulkLanes]string
	markerTTL int64

	// Owned by the loop goroutine (and Start, before it runs).
	clock   offsetFilter
	unacked []*bulkCall // bulk calls sent without a usable reply, to resend first
	seq     int64
	state   map[keyID]*keyState
	// recs holds the keys whose store hash keeps a reservation record of
	// this instance that is no longer needed, with the local time it was
	// made: the next bulk push of the key removes it, or the key's TTL
	// does (then the entry is dropped here too: see pruneRecs).
	recs map[keyID]int64
	prev []item // keys pushed in the last full cycle, to pull once more
	refs []localcache.Ref
	buf  []localcache.Bucket

	stats struct {
		cycles, urgentCycles, keySyncs, reservations, roundTrips, commands,
		failures, corrections, retried, lastCycle, lastCycleKeys atomic.Int64
	}
}

type keyID struct {
	rule *Rule
	key  string
}

// keyState is what the syncer remembers of a key between cycles: batches sent
// without a reply, and corrections not yet pushed.
type keyState struct {
	ref     localcache.Ref
	batches []*batch
	corr    []localcache.Bucket
}

type batch struct {
	seq    int64
	deltas []localcache.Bucket // from pend: acknowledged on success
	forced []localcache.Bucket // corrections: not in pend
	costs  []int64             // reservations (decided only on the first send)
	ws     []*waiter           // their waiters
	sent   int                 // times sent
}

// waiter states.
const (
	wQueued int32 = iota
	wSent
	wDone
	wAbandoned
)

type waiter struct {
	id    keyID
	ref   localcache.Ref
	n     int64
	state atomic.Int32
	res   Result
	err   error
	done  chan struct{}
}

// New returns a Syncer for rules. Call Start to register and begin syncing.
func New(cfg Config, rules []*Rule) (*Syncer, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("syncer: Client is nil")
	case cfg.Prefix == "" || cfg.InstanceID == "":
		return nil, errors.New("syncer: Prefix and InstanceID are required")
	case cfg.Interval <= 0 || cfg.Timeout <= 0:
		return nil, errors.New("syncer: Interval and Timeout must be positive")
	case cfg.LocalNow == nil:
		return nil, errors.New("syncer: LocalNow is nil")
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = max(time.Second, 2*cfg.Interval)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if cfg.InstanceTTL <= 0 {
		cfg.InstanceTTL = max(3*time.Second, 10*cfg.Interval)
	}
	s := &Syncer{
		cfg:      cfg,
		rules:    rules,
		byTab:    make(map[*localcache.Table]*Rule, len(rules)),
		reg:      cfg.Prefix + ":instances",
		wake:     make(chan struct{}, 1),
		flushReq: make(chan chan error),
		done:     make(chan struct{}),
		stopped:  make(chan struct{}),
		state:    make(map[keyID]*keyState),
		recs:     make(map[keyID]int64),
	}
	s.life, s.kill = context.WithCancel(context.Background())
	for _, r := range rules {
		sub := r.Geometry.Sub()
		if sub < int64(time.Microsecond) || sub%int64(time.Microsecond) != 0 {
			return nil, fmt.Errorf("syncer: rule %q: sub-window %v is not a whole number of microseconds", r.Name, time.Duration(sub))
		}
		r.prefix = cfg.Prefix + ":{" + r.Name + ":"
		r.suffix = "}:" + strconv.FormatInt(sub/1000, 10)
		r.subUs = sub / 1000
		r.span = r.Geometry.Span()
		// Keep a key while anything in it can still count, plus a margin
		// for clock offsets.
		r.ttlMs = (int64(r.Geometry.Window())+sub)/int64(time.Millisecond) + 1000
		s.byTab[r.Table] = r
		s.markerTTL = max(s.markerTTL, 2*r.ttlMs)
	}
	_, s.bulk = cfg.Client.(*redis.Client)
	s.bulk = s.bulk && !cfg.perKey
	for i := range s.markers {
		s.markers[i] = string(EncodeKey([]byte(cfg.Prefix+":bulk:"), cfg.InstanceID)) + ":" + strconv.Itoa(i)
	}
	s.markerTTL = max(s.markerTTL, 2*cfg.InstanceTTL.Milliseconds())
	s.instances.Store(1)
	return s, nil
}

// KeyName returns the Redis key of a limiter key: "<prefix>:{<rule>:<key>}:<sub-window µs>",
// with the key percent-encoded (see EncodeKey). The braces make it a Redis
// Cluster hash tag, so everything of one limiter key lives in one slot; the
// sub-window length keeps rules whose geometry changed from mixing buckets.
func (r *Rule) KeyName(key string) string {
	b := r.AppendKeyName(make([]byte, 0, len(r.prefix)+len(key)+len(r.suffix)+8), key)
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is never written again
}

// AppendKeyName appends the Redis key of a limiter key (see KeyName) to dst.
func (r *Rule) AppendKeyName(dst []byte, key string) []byte {
	dst = append(dst, r.prefix...)
	dst = EncodeKey(dst, key)
	return append(dst, r.suffix...)
}

// Start registers the instance (one round trip, bounded by ctx) and starts the
// background loop. A failed registration is returned, but the loop starts
// anyway and keeps trying: the limiter works on its failure mode meanwhile.
func (s *Syncer) Start(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.heartbeat(ctx)
	s.setHealth(err == nil, err)
	s.start.Do(func() {
		s.running.Store(true)
		go s.loop()
	})
	return err
}

// Now returns the current time on the store clock, in ns.
func (s *Syncer) Now() int64 { return s.cfg.LocalNow() + s.offset.Load() }

// Offset returns the store clock minus the local clock.
func (s *Syncer) Offset() time.Duration { return time.Duration(s.offset.Load()) }

// Instances returns N̂, the number of live instances at the last heartbeat
// (at least 1).
func (s *Syncer) Instances() int { return int(s.instances.Load()) }

// Healthy reports whether the last round trip to the store succeeded.
func (s *Syncer) Healthy() bool { return s.healthy.Load() }

// Stats returns the counters.
func (s *Syncer) Stats() Stats {
	return Stats{
		Cycles:        s.stats.cycles.Load(),
		UrgentCycles:  s.stats.urgentCycles.Load(),
		KeySyncs:      s.stats.keySyncs.Load(),
		Reservations:  s.stats.reservations.Load(),
		RoundTrips:    s.stats.roundTrips.Load(),
		Commands:      s.stats.commands.Load(),
		Failures:      s.stats.failures.Load(),
		Corrections:   s.stats.corrections.Load(),
		Retried:       s.stats.retried.Load(),
		LastCycle:     time.Duration(s.stats.lastCycle.Load()),
		LastCycleKeys: s.stats.lastCycleKeys.Load(),
		Instances:     s.instances.Load(),
		Offset:        s.Offset(),
		Healthy:       s.healthy.Load(),
	}
}

// Flush runs a full cycle now and waits for it: everything admitted so far is
// pushed and every key's totals pulled, unless the store fails.
func (s *Syncer) Flush(ctx context.Context) error {
	if s.closed.Load() || !s.running.Load() {
		return ErrClosed
	}
	ch := make(chan error, 1)
	select {
	case s.flushReq <- ch:
	case <-s.stopped:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close flushes, stops the loop and removes the instance from the registry.
// Waiting reservations fail with ErrClosed. It is idempotent.
//
// Close waits for the final flush until ctx ends. Then it cancels the store
// round trip in flight: a client whose socket reads ignore context deadlines
// (go-redis without ContextTimeoutEnabled) still finishes the read it is in,
// but does not retry, so Close returns at most one read timeout after ctx.
func (s *Syncer) Close(ctx context.Context) error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	defer s.kill()
	s.start.Do(func() {}) // a later Start must not launch the loop
	var err error
	if s.running.Load() {
		ch := make(chan error, 1)
		select {
		case s.flushReq <- ch:
			select {
			case err = <-ch:
			case <-ctx.Done():
				err = ctx.Err()
			}
		case <-ctx.Done():
			err = ctx.Err()
		}
		if ctx.Err() != nil {
			s.kill()
		}
		close(s.done)
		<-s.stopped
	}
	s.failWaiters(ErrClosed)
	if s.healthy.Load() {
		if derr := s.deregister(ctx); err == nil {
			err = derr
		}
	}
	return err
}

func (s *Syncer) loop() {
	defer close(s.stopped)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			_ = s.cycle()
		case <-s.wake:
			s.serveUrgent()
		case ch := <-s.flushReq:
			ch <- s.cycle()
		}
	}
}

func (s *Syncer) setHealth(ok bool, err error) {
	if s.healthy.Swap(ok) != ok && s.cfg.OnHealth != nil {
		s.cfg.OnHealth(ok, err)
	}
}

// heartbeat refreshes the registry entry, N̂ and the clock offset.
func (s *Syncer) heartbeat(ctx context.Context) error {
	return s.registry(ctx, false)
}

func (s *Syncer) deregister(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	return s.registry(ctx, true)
}

func (s *Syncer) registry(ctx context.Context, remove bool) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	rm := "0"
	if remove {
		rm = "1"
	}
	sent := s.cfg.LocalNow()
	s.stats.roundTrips.Add(1)
	s.stats.commands.Add(1)
	v, err := registryScript.Run(ctx, s.cfg.Client, []string{s.reg}, s.cfg.InstanceID, s.cfg.InstanceTTL.Milliseconds(), rm).Slice()
	recv := s.cfg.LocalNow()
	if err != nil {
		s.stats.failures.Add(1)
		return fmt.Errorf("syncer: registry: %w", err)
	}
	if len(v) != 3 {
		return fmt.Errorf("syncer: registry: unexpected reply %v", v)
	}
	sec, err1 := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
	usec, err2 := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
	n, ok := v[2].(int64)
	if err1 != nil || err2 != nil || !ok {
		return fmt.Errorf("syncer: registry: unexpected reply %v", v)
	}
	if remove {
		return nil
	}
	store := sec*int64(time.Second) + usec*int64(time.Microsecond)
	s.offset.Store(s.clock.sample(store-(sent+recv)/2, recv-sent))
	n = max(n, 1)
	s.instances.Store(n)
	if s.cfg.OnInstances != nil {
		s.cfg.OnInstances(int(n))
	}
	return nil
}

// offsetFilter keeps the clock offsets of the last few heartbeats and
// answers the one measured with the shortest round trip: the midpoint of a
// round trip is off by half its asymmetry, which a short one bounds best (as
// NTP does). A window of eight heartbeats follows a store clock that steps
// within a second at the default interval.
type offsetFilter struct {
	off, rtt [8]int64
	n, next  int
}

func (f *offsetFilter) sample(off, rtt int64) int64 {
	f.off[f.next], f.rtt[f.next] = off, rtt
	f.next = (f.next + 1) % len(f.off)
	f.n = min(f.n+1, len(f.off))
	best := 0
	for i := 1; i < f.n; i++ {
		if f.rtt[i] < f.rtt[best] {
			best = i
		}
	}
	return f.off[best]
}

// cycle is one full sync: heartbeat, then every dirty key and every key with
// something outstanding, in pipelines, serving urgent reservations between
// them.
func (s *Syncer) cycle() error {
	start := time.Now()
	s.stats.cycles.Add(1)
	ctx := s.life
	if err := s.heartbeat(ctx); err != nil {
		s.setHealth(false, err)
		s.failWaiters(ErrUnavailable)
		return err
	}
	s.setHealth(true, nil)
	// A bulk call left unanswered by an earlier cycle goes first: nothing
	// else is pushed before the store has it.
	if err := s.resendBulk(ctx); err != nil {
		return err
	}
	s.pruneRecs()
	beat := time.Now()
	items := s.collect()
	var err error
	// On the bulk path the pipelines overlap: batches take turns on
	// bulkLanes lanes, each with its own marker, so while the store runs one
	// lane's call the loop settles another's reply and builds the next
	// call. A lane sends a call only once its previous one has its reply
	// (see bulkScript: a lane's calls must run in order).
	var fly [bulkLanes]*bulkCall
	// landAll waits for and settles every call in flight, oldest first. It
	// returns the first send error (that call and any after it are queued
	// for a resend).
	landAll := func() error {
		var first error
		for {
			c := oldest(fly[:])
			if c == nil {
				return first
			}
			fly[c.lane] = nil
			if err := s.landBulk(c); err != nil {
				first = cmp.Or(first, err)
			} else {
				_ = s.settleBulk(c) // a reply it cannot read: queued for a resend
			}
		}
	}
	for b, i := 0, 0; i < len(items); b, i = b+1, i+s.cfg.Batch {
		end := min(i+s.cfg.Batch, len(items))
		simple, rest := s.split(items[i:end])
		// A cycle that outlasts the heartbeat period (a key flood, a slow
		// store) heartbeats on the way: else the instance's registry entry
		// expires mid-cycle, the others undercount N̂ and widen their caps.
		beatDue := time.Since(beat) >= s.beatEvery()
		if beatDue || s.hasUrgent() {
			// Reservations may concern keys of the calls in flight: let
			// them land first, and send nothing else meanwhile.
			if lerr := landAll(); lerr != nil {
				err = cmp.Or(err, lerr)
				s.requeue(items[i:]) // nothing of this batch was sent
				break
			}
			s.serveUrgent()
			if beatDue {
				if herr := s.heartbeat(ctx); herr != nil {
					err = cmp.Or(err, herr)
					s.setHealth(false, herr)
					s.failWaiters(ErrUnavailable)
					s.requeue(items[i:])
					break
				}
				beat = time.Now()
			}
		}
		// Built after the reservations are served: a reservation pushes
		// its key's pending counts, which must not travel twice.
		var next *bulkCall
		if len(simple) > 0 {
			next = s.newBulk(simple, s.Now())
			next.lane = b % bulkLanes
		}
		var landed *bulkCall
		if next != nil && fly[next.lane] != nil {
			landed, fly[next.lane] = fly[next.lane], nil
			if lerr := s.landBulk(landed); lerr != nil {
				err = cmp.Or(err, lerr)
				s.requeue(items[i:])
				break
			}
		}
		if next != nil {
			s.startBulk(ctx, next)
			fly[next.lane] = next
		}
		if landed != nil {
			// A reply it cannot read leaves the call queued for a resend,
			// which the store recognises as run; the cycle goes on.
			_ = s.settleBulk(landed)
		}
		if len(rest) > 0 {
			if perr := s.syncPerKey(ctx, rest); perr != nil {
				err = cmp.Or(err, perr)
				// Redis answered with an error for some keys (their
				// batches are kept): go on with the others. A store
				// that failed leaves the rest queued.
				if !s.healthy.Load() {
					s.requeue(items[end:])
					break
				}
			}
		}
	}
	if lerr := landAll(); lerr != nil {
		err = cmp.Or(err, lerr)
	}
	s.serveUrgent()
	s.stats.lastCycle.Store(int64(time.Since(start)))
	s.stats.lastCycleKeys.Store(int64(len(items)))
	return err
}

// pruneRecs forgets the reservation records that the store has expired
// with their keys: a key that went idle after a reservation is never pushed
// on the bulk path again, and recs must not grow with every such key.
func (s *Syncer) pruneRecs() {
	if len(s.recs) == 0 {
		return
	}
	now := s.cfg.LocalNow()
	for id, at := range s.recs {
		if now-at > id.rule.ttlMs*int64(time.Millisecond) {
			delete(s.recs, id)
		}
	}
}

// beatEvery is how often a long cycle heartbeats: every Interval, and at
// least three times per InstanceTTL.
func (s *Syncer) beatEvery() time.Duration {
	return min(s.cfg.Interval, s.cfg.InstanceTTL/3)
}

// item is one key to sync, with the reservations waiting on it.
type item struct {
	id  keyID
	ref localcache.Ref // nil: no local state to push or settle
	ws  []*waiter
}

// collect drains every table's dirty keys and adds the keys with something
// outstanding and, for one more cycle, the keys pushed in the last one: that
// follow-up pull brings back what the other instances pushed in the same
// cycle, so after one sync without traffic every instance sees the same
// totals.
func (s *Syncer) collect() []item {
	var items []item
	seen := make(map[keyID]bool, len(s.state)+len(s.prev))
	for id, ks := range s.state {
		seen[id] = true
		items = append(items, item{id: id, ref: ks.ref})
	}
	for _, r := range s.rules {
		s.refs = r.Table.Drain(s.refs[:0])
		for _, ref := range s.refs {
			id := keyID{rule: r, key: r.Table.Key(ref)}
			if !seen[id] {
				seen[id] = true
				items = append(items, item{id: id, ref: ref})
			}
		}
	}
	clear(s.refs)
	for _, it := range s.prev {
		if !seen[it.id] {
			items = append(items, item{id: it.id, ref: it.ref})
		}
	}
	s.prev = s.prev[:0]
	return items
}

// Reserve asks the store to decide cost n for key of the rule whose table is
// t, and waits for the answer, at most Config.Timeout or until ctx is done.
// ref is the key's local entry (nil if it has none): its pending counts travel
// in the same call and its view is refreshed from the reply. On an error the
// caller decides by its failure mode and counts what it admits locally.
func (s *Syncer) Reserve(ctx context.Context, t *localcache.Table, key string, ref localcache.Ref, n int64) (Result, error) {
	if s.closed.Load() {
		return Result{}, ErrClosed
	}
	if !s.healthy.Load() {
		return Result{}, ErrUnavailable
	}
	r := s.byTab[t]
	if r == nil {
		return Result{}, errors.New("syncer: unknown table")
	}
	w := &waiter{id: keyID{rule: r, key: key}, ref: ref, n: n, done: make(chan struct{})}
	s.mu.Lock()
	s.urgent = append(s.urgent, w)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	timer := time.NewTimer(s.cfg.Timeout)
	defer timer.Stop()
	select {
	case <-w.done:
		return w.res, w.err
	case <-timer.C:
	case <-ctx.Done():
	case <-s.stopped:
	}
	for {
		st := w.state.Load()
		if st == wDone {
			<-w.done
			return w.res, w.err
		}
		if w.state.CompareAndSwap(st, wAbandoned) {
			switch {
			case s.closed.Load():
				return Result{}, ErrClosed
			case ctx.Err() != nil:
				return Result{}, ctx.Err()
			}
			return Result{}, ErrTimeout
		}
	}
}

// failWaiters answers every queued (unsent) reservation with err.
func (s *Syncer) failWaiters(err error) {
	s.mu.Lock()
	ws := s.urgent
	s.urgent = nil
	s.mu.Unlock()
	for _, w := range ws {
		s.finish(w, Result{}, err)
	}
}

// finish hands a result to a waiter that still waits; it reports whether the
// waiter had given up instead.
func (s *Syncer) finish(w *waiter, res Result, err error) (abandoned bool) {
	for {
		st := w.state.Load()
		switch st {
		case wAbandoned:
			return true
		case wDone:
			return false
		}
		w.res, w.err = res, err
		if w.state.CompareAndSwap(st, wDone) {
			close(w.done)
			return false
		}
	}
}

// correct queues a count of n (negative: a reservation the store admitted but
// the caller did not count on) in bucket k of a key, for its next call.
func (s *Syncer) correct(id keyID, ref localcache.Ref, k, n int64) {
	ks := s.keyState(id, ref)
	ks.corr = append(ks.corr, localcache.Bucket{Index: k, Count: n})
	s.stats.corrections.Add(1)
}

func (s *Syncer) keyState(id keyID, ref localcache.Ref) *keyState {
	ks := s.state[id]
	if ks == nil {
		ks = &keyState{ref: ref}
		s.state[id] = ks
	}
	if ks.ref == nil {
		ks.ref = ref
	}
	return ks
}

// serveUrgent sends every queued reservation, grouped by key.
func (s *Syncer) serveUrgent() {
	s.mu.Lock()
	ws := s.urgent
	s.urgent = nil
	s.mu.Unlock()
	if len(ws) == 0 {
		return
	}
	s.stats.urgentCycles.Add(1)
	if !s.healthy.Load() {
		for _, w := range ws {
			s.finish(w, Result{}, ErrUnavailable)
		}
		return
	}
	index := make(map[keyID]int, len(ws))
	var items []item
	for _, w := range ws {
		i, ok := index[w.id]
		if !ok {
			i = len(items)
			index[w.id] = i
			items = append(items, item{id: w.id, ref: w.ref})
		}
		if items[i].ref == nil {
			items[i].ref = w.ref
		}
		items[i].ws = append(items[i].ws, w)
	}
	for i := 0; i < len(items); i += s.cfg.Batch {
		end := min(i+s.cfg.Batch, len(items))
		if err := s.syncKeys(s.life, items[i:end]); err != nil && !s.healthy.Load() {
			for _, it := range items[end:] {
				for _, w := range it.ws {
					s.finish(w, Result{}, ErrUnavailable)
				}
			}
			return
		}
	}
}

// requeue hands back items that were not sent: keys are marked dirty again
// and waiters answered ErrUnavailable (they decide by their failure mode).
func (s *Syncer) requeue(items []item) {
	for _, it := range items {
		if it.ref != nil {
			it.id.rule.Table.MarkDirty(it.ref)
		}
		for _, w := range it.ws {
			s.finish(w, Result{}, ErrUnavailable)
		}
	}
}

// call is one key's script call within a pipeline.
type call struct {
	it      item
	batches []*batch
	cmd     *redis.Cmd
}

// nextSeq returns a sequence number larger than every earlier one: the store
// time in µs, or one more than the last if the clock has not moved.
func (s *Syncer) nextSeq(now int64) int64 {
	s.seq = max(s.seq+1, now/int64(time.Microsecond))
	return s.seq
}

// build prepares a key's call: its unanswered batches, resent as they were,
// and a new batch with what it admitted since, its corrections and its
// reservations. ok is false if there is nothing to send.
func (s *Syncer) build(it item, now int64) (c call, ok bool) {
	r := it.id.rule
	ks := s.state[it.id]
	if it.ref == nil && ks != nil {
		it.ref = ks.ref
	}
	var pend []localcache.Bucket
	if it.ref != nil {
		s.buf = r.Table.Pending(it.ref, now, s.buf[:0])
		pend = s.buf
	}
	nb := &batch{}
	for _, p := range pend {
		count := p.Count
		if ks != nil {
			for _, b := range ks.batches {
				for _, d := range b.deltas {
					if d.Index == p.Index {
						count -= d.Count
					}
				}
			}
		}
		if count > 0 {
			nb.deltas = append(nb.deltas, localcache.Bucket{Index: p.Index, Count: count})
		}
	}
	if ks != nil {
		nb.forced, ks.corr = ks.corr, nil
		c.batches = append(c.batches, ks.batches...)
	}
	for _, w := range it.ws {
		if w.state.CompareAndSwap(wQueued, wSent) {
			nb.costs = append(nb.costs, w.n)
			nb.ws = append(nb.ws, w)
		}
		// A waiter that gave up before this send decided (and counted)
		// by its failure mode: nothing to send for it.
	}
	if len(nb.deltas) > 0 || len(nb.forced) > 0 || len(nb.costs) > 0 {
		nb.seq = s.nextSeq(now)
		c.batches = append(c.batches, nb)
	}
	c.it = it
	// With nothing to push the call still pulls the key's totals.
	return c, len(c.batches) > 0 || it.ref != nil
}

func (s *Syncer) args(c *call) []any {
	r := c.it.id.rule
	args := make([]any, 0, 6+len(c.batches)*8)
	args = append(args, r.subUs, r.span, r.Limit, r.ttlMs, s.cfg.InstanceID, len(c.batches))
	for _, b := range c.batches {
		costs := b.costs
		if b.sent > 0 {
			costs = nil // decided on the first send, or by the caller's fallback
			s.stats.retried.Add(1)
		}
		b.sent++
		args = append(args, strconv.FormatInt(b.seq, 10), len(b.deltas)+len(b.forced), len(costs))
		for _, d := range b.deltas {
			args = append(args, d.Index, d.Count)
		}
		for _, d := range b.forced {
			args = append(args, d.Index, d.Count)
		}
		for _, n := range costs {
			args = append(args, n)
		}
	}
	return args
}

// syncKeys syncs items and waits for the answers: first any unanswered bulk
// call, then the bulk-path items in one bulk call, then the others in one
// pipeline of per-key calls. It returns the first store error; items not
// sent are queued again.
func (s *Syncer) syncKeys(ctx context.Context, items []item) error {
	if err := s.resendBulk(ctx); err != nil {
		s.requeue(items)
		return err
	}
	simple, rest := s.split(items)
	if err := s.syncBulk(ctx, simple); err != nil {
		s.requeue(rest)
		return err
	}
	return s.syncPerKey(ctx, rest)
}

// split separates the items that take the bulk path from the others.
func (s *Syncer) split(items []item) (simple, rest []item) {
	if !s.bulk {
		return nil, items
	}
	for _, it := range items {
		if s.bulkable(it) {
			simple = append(simple, it)
		} else {
			rest = append(rest, it)
		}
	}
	return simple, rest
}

// hasUrgent reports whether reservations wait to be sent.
func (s *Syncer) hasUrgent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.urgent) > 0
}

// syncPerKey sends one pipeline of per-key calls for items and applies the
// replies. It returns the first store error.
func (s *Syncer) syncPerKey(ctx context.Context, items []item) error {
	now := s.Now()
	calls := make([]call, 0, len(items))
	for _, it := range items {
		if c, ok := s.build(it, now); ok {
			calls = append(calls, c)
		} else if ks := s.state[it.id]; ks != nil && len(ks.batches) == 0 && len(ks.corr) == 0 {
			delete(s.state, it.id)
		}
	}
	if len(calls) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	s.exec(ctx, calls)
	var first error
	for i := range calls {
		c := &calls[i]
		err := c.cmd.Err()
		if err == nil {
			err = s.apply(c)
		}
		if err != nil {
			s.fail(c, err)
			if first == nil {
				first = fmt.Errorf("syncer: push: %w", err)
			}
		}
	}
	if first != nil {
		s.stats.failures.Add(1)
		var rerr redis.Error
		if !errors.As(first, &rerr) {
			s.setHealth(false, first)
		}
	}
	return first
}

// exec sends the calls in one pipeline; calls the store answers NOSCRIPT to
// (a new or restarted node) are sent again after loading the script, on every
// shard of a cluster.
func (s *Syncer) exec(ctx context.Context, calls []call) {
	send := func(idx []int) {
		pipe := s.cfg.Client.Pipeline()
		for _, i := range idx {
			c := &calls[i]
			c.cmd = syncScript.EvalSha(ctx, pipe, []string{c.it.id.rule.KeyName(c.it.id.key)}, s.args(c)...)
		}
		s.stats.roundTrips.Add(1)
		s.stats.commands.Add(int64(len(idx)))
		_, _ = pipe.Exec(ctx) // errors are per command
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	send(all)
	var redo []int
	for i := range calls {
		if isNoScript(calls[i].cmd.Err()) {
			redo = append(redo, i)
			// Not executed: this send does not count.
			for _, b := range calls[i].batches {
				b.sent--
			}
		}
	}
	if len(redo) == 0 {
		return
	}
	if err := syncScript.Load(ctx, s.cfg.Client).Err(); err != nil {
		return // the NOSCRIPT errors stand; the calls are retried next cycle
	}
	send(redo)
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// apply handles a successful reply: answers the waiters, turns store
// admissions nobody counted on into corrections, and settles the key.
func (s *Syncer) apply(c *call) error {
	r := c.it.id.rule
	v, err := c.cmd.Slice()
	if err != nil {
		return err
	}
	if len(v) != 2+r.span+2*len(c.batches) {
		return fmt.Errorf("unexpected reply of %d values", len(v))
	}
	ints := make([]int64, 2+r.span)
	for i := range ints {
		n, ok := v[i].(int64)
		if !ok {
			return fmt.Errorf("unexpected reply value %v", v[i])
		}
		ints[i] = n
	}
	nowStore, oldest, totals := ints[0]*int64(time.Microsecond), ints[1], ints[2:]
	res := s.result(r, nowStore, oldest, totals)
	type answer struct {
		w   *waiter
		res Result
		k   int64 // bucket the store counted an admission in
	}
	var acked []localcache.Bucket
	var answers []answer
	for bi, b := range c.batches {
		status, _ := v[2+r.span+2*bi].(int64)
		bits, _ := v[2+r.span+2*bi+1].(string)
		acked = append(acked, b.deltas...)
		if status == 2 || len(b.costs) == 0 {
			continue
		}
		if s.bulk {
			s.recs[c.it.id] = s.cfg.LocalNow()
		}
		k := r.Geometry.Index(nowStore)
		if status == 1 {
			// Applied by an earlier send (a go-redis retry, or ours after
			// a lost reply): the store returns the results it recorded
			// and the bucket it counted the admissions in.
			var kb string
			bits, kb, _ = strings.Cut(bits, ":")
			if kk, err := strconv.ParseInt(kb, 10, 64); err == nil {
				k = kk
			}
		}
		if b.ws == nil {
			// The callers were answered with an error when a send
			// failed, and decided by their failure mode: undo what the
			// store admitted for them.
			for i, n := range b.costs {
				if i < len(bits) && bits[i] == '1' {
					s.correct(c.it.id, c.it.ref, k, -n)
				}
			}
			continue
		}
		for i, w := range b.ws {
			a := answer{w: w, res: res, k: k}
			a.res.Admitted = i < len(bits) && bits[i] == '1'
			if !a.res.Admitted {
				a.res.RetryAfter = s.retryAfter(r, nowStore, oldest, totals, w.n)
			}
			answers = append(answers, a)
		}
		b.ws = nil
	}
	if ks := s.state[c.it.id]; ks != nil {
		ks.batches = nil
		if len(ks.corr) == 0 {
			delete(s.state, c.it.id)
		}
	}
	if c.it.ref != nil {
		r.Table.Settle(c.it.ref, s.Now(), acked, oldest, totals)
		if len(c.batches) > 0 {
			s.prev = append(s.prev, c.it)
		}
	}
	// Answer after Settle, so a caller sees its key's fresh view.
	for _, a := range answers {
		s.stats.reservations.Add(1)
		if s.finish(a.w, a.res, nil) && a.res.Admitted {
			// The caller gave up waiting: it decided by its failure mode.
			s.correct(c.it.id, c.it.ref, a.k, -a.w.n)
		}
	}
	s.stats.keySyncs.Add(1)
	return nil
}

// fail handles a call without a usable reply. Its batches may or may not
// have been applied: they are kept, to be resent as they are. Its waiters get
// ErrUnavailable and decide by their failure mode.
func (s *Syncer) fail(c *call, err error) {
	ks := s.keyState(c.it.id, c.it.ref)
	ks.batches = c.batches
	for _, b := range c.batches {
		for _, w := range b.ws {
			s.finish(w, Result{}, ErrUnavailable)
		}
		b.ws = nil
		// The waiters now decide by their failure mode, so the store must
		// never decide these reservations: resend without the costs even
		// if this send was not executed (NOSCRIPT, then the load failed).
		b.sent = max(b.sent, 1)
	}
}

// result computes Remaining and ResetAfter from a reply.
func (s *Syncer) result(r *Rule, now, oldest int64, totals []int64) Result {
	count := func(j int64) int64 {
		if i := j - oldest; i >= 0 && i < int64(len(totals)) {
			return totals[i]
		}
		return 0
	}
	est := r.Geometry.Estimate(now, count)
	rem := r.Limit - int64(est+0.999999)
	return Result{Remaining: max(rem, 0), ResetAfter: r.Geometry.ResetAfter(now)}
}

func (s *Syncer) retryAfter(r *Rule, now, oldest int64, totals []int64, n int64) time.Duration {
	return r.Geometry.RetryAfter(now, r.Limit, n, func(j int64) int64 {
		if i := j - oldest; i >= 0 && i < int64(len(totals)) {
			return totals[i]
		}
		return 0
	})
}
