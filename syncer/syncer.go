// Package syncer converges a fleet through Redis: it pushes an instance's increments and pulls merged totals back.
//
// This package is sluice's machinery, not its API: it exports what sluice's
// other packages (and their tests) use of it, with no compatibility promise.
// Programs import package sluice (and policy, httplimit).
//
// It works one atomic step per key, batched in pipelines, and also runs the
// live-instance registry and the store-clock offset. It knows a rule's keys
// only through the syncport.Keys interface (localcache.Table.SyncKeys
// implements it), and publishes what it learns of the fleet (Fleet,
// Changed) rather than calling back into its user.
//
// # Protocol
//
// Every limiter key is one Redis hash (see windowRule.keyName) whose fields are bucket
// indices. Once a SyncInterval, and at once when a check asks for it (urgent
// syncs), the syncer drains the keys admitted to since its last pass and sends,
// per key, one call of a Lua script that adds this instance's unacknowledged
// counts, decides any reservations (checks that had to be decided by the
// store), and returns the window's totals: push and pull in one atomic step.
// Calls travel in pipelines of Config.Batch keys; a cluster client splits them
// by node. On a standalone store the keys that only push and pull take the
// bulk path instead (bulk.go): one script call per pipeline adds every key's
// counts, and an HGETALL per key pulls its window.
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
//
// # Files
//
// syncer.go holds the Syncer and its lifecycle, rule.go the rules and key
// names, fleet.go the registry, health and clock offset, health.go the
// start-up check and a store that refuses writes or this client, cycle.go a sync
// cycle, reserve.go reservations, perkey.go the per-key script path, bulk.go
// the bulk path, scripts.go the Lua, stats.go the counters, observer.go
// what it reports to telemetry (Observer).
package syncer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/keyname"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/window"
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
	// Clock is the local clock (Now returns the current local time); nil
	// means the system clock, read through its monotonic reading (immune to
	// wall-clock steps). The store clock is this clock plus the offset
	// measured at every heartbeat.
	Clock interface{ Now() time.Time }
	// Observer, if not nil, hears the cycles, urgent round trips, store
	// errors and over-limit pulls (telemetry).
	Observer syncport.Observer

	// perKey forces the per-key path on a standalone store (tests).
	perKey bool
}

// Syncer is the background sync of one limiter. Its methods are safe for
// concurrent use.
type Syncer struct {
	cfg     Config
	rulesMu sync.Mutex
	rules   []*windowRule // copied on write: a slice handed out is never written
	retired []*windowRule // to drain once more, then forget
	reg     string        // registry key
	base    time.Time
	baseN   int64 // base as Unix ns

	offset    atomic.Int64
	instances atomic.Int64
	// oldestBeat is oldestHeartbeat.
	oldestBeat atomic.Int64
	// joinedAt is the store time (ns, whole ms) of the heartbeat that last
	// registered the instance (0: none yet); countedAt that of its first
	// heartbeat since that found every other live instance's latest
	// heartbeat later (at most joinedAt: none yet); joining is isJoining.
	joinedAt   atomic.Int64
	countedAt  atomic.Int64
	joining    atomic.Bool
	healthy    atomic.Bool
	timeouts   atomic.Int64 // checks in a row not answered within Timeout
	lastAnswer atomic.Int64 // local ns of the store's last answer to any round trip
	probing    atomic.Bool  // a probe confirms a suspected hang (deadline.go)
	lastPulse  atomic.Int64 // local ns of the last pulse
	starved    atomic.Int64 // local ns until which silence proves nothing (deadline.go)
	doubts     atomic.Int64 // probes in a row that waits for a CPU left inconclusive (deadline.go)
	closed     atomic.Bool
	running    atomic.Bool
	// refusing is the refusal state (health.go): the store refuses writes
	// or this client; refusals counts the refusals seen and the failures
	// while refusing, goodCycles the cycles in a row since whose writes it
	// accepted (loop only).
	refusing   atomic.Bool
	refusals   atomic.Int64
	goodCycles int64
	streak     int64       // refusals when goodCycles began counting (loop only)
	checked    atomic.Bool // Check ran: Start need not register again

	// longWaits counts the goroutine waits for a CPU of starveGap or more
	// so far (schedwait.go; tests replace it).
	longWaits func() uint64

	fleetMu sync.Mutex
	fleet   syncport.Fleet
	changed chan struct{}

	mu      sync.Mutex
	urgent  []*waiter
	early   atomic.Bool // a key asked for an early sync (askEarly)
	refunds []refund    // refunded store admissions, for the next cycle (refund.go)

	wake     chan struct{}
	flushReq chan flushRequest
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
	markerTTL atomic.Int64
	// standalone: the store is one Redis, whose scripts may read the
	// epoch (epochKey) beside the keys they write (rebuild.go).
	standalone bool
	epochKey   string

	// Owned by the loop goroutine (and Start, before it runs).
	clock   offsetFilter
	unacked []*bulkCall // bulk calls sent without a usable reply, to resend first
	seq     int64
	state   map[keyID]*keyState
	leases  map[keyID]leased // keys holding a lease, by the syncer's loop only
	// uses holds what the keys granted a lease used of their leases, for
	// the leases ahead (ahead.go).
	uses map[keyID]use
	// recs holds the keys whose store hash keeps a reservation record of
	// this instance that is no longer needed, with the local time it was
	// made: the next bulk push of the key removes it, or the key's TTL
	// does (then the entry is dropped here too: see pruneRecs).
	recs map[keyID]int64
	prev []item // keys pushed in the last full cycle, to pull once more
	// flushing makes the cycle under way sync every key drained (Flush,
	// Close), not only those that need it (Keys.Need).
	flushing bool
	// back is set from the first cycle after an outage (or before the
	// store was ever reached) until a cycle has pushed every pending count
	// and heartbeated: one that ended early (a resend Redis answered with
	// an error) leaves the next cycle back too.
	back bool
	refs []handle
	buf  []window.Bucket
	// calls, totals and acked are syncPerKey's scratch arrays: a
	// pipeline's calls, and a reply's totals (when nobody waits on them)
	// and acknowledged counts.
	calls  []call
	totals []int64
	acked  []window.Bucket
	free   []*batch // batches for reuse (newBatch)
	// urgentAt is when the loop last served a reservation (step), on the
	// local clock.
	urgentAt time.Time
	// cycleKeys is the number of keys of the cycle under way (Observer).
	cycleKeys int

	// epoch is the store's epoch this instance's view belongs to; lost, a
	// newer one it has not restored the store into yet; held, the N̂ kept
	// until holdUntil (local ns) after a loss (rebuild.go). Owned by the
	// loop goroutine.
	epoch, lost     string
	held, holdUntil int64
	// beatAt is the expiry (store ms) the last heartbeat wrote, 0 if none:
	// a store that lost it went back in time (rebuild.go).
	beatAt int64

	stats counters
}

type keyID struct {
	rule *windowRule
	key  string
}

// New returns a Syncer for rules. Call Start to register and begin
// syncing; Rules adds rules later and returns their handles.
func New(cfg Config, rules ...syncport.RuleConfig) (*Syncer, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("syncer: Client is nil")
	case cfg.Prefix == "" || cfg.InstanceID == "":
		return nil, errors.New("syncer: Prefix and InstanceID are required")
	case cfg.Interval <= 0 || cfg.Timeout <= 0:
		return nil, errors.New("syncer: Interval and Timeout must be positive")
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
		changed:  make(chan struct{}, 1),
		reg:      cfg.Prefix + ":instances",
		wake:     make(chan struct{}, 1),
		flushReq: make(chan flushRequest),
		done:     make(chan struct{}),
		stopped:  make(chan struct{}),
		state:    make(map[keyID]*keyState),
		leases:   make(map[keyID]leased),
		uses:     make(map[keyID]use),
		recs:     make(map[keyID]int64),
	}
	s.longWaits = longWaits
	s.base = time.Now()
	s.baseN = s.base.UnixNano()
	s.life, s.kill = context.WithCancel(context.Background())
	seen := make(map[string]bool, len(rules))
	for _, rc := range rules {
		if seen[rc.Name] {
			return nil, fmt.Errorf("syncer: rule %q: duplicate name", rc.Name)
		}
		seen[rc.Name] = true
		if _, err := s.addRule(rc); err != nil {
			return nil, err
		}
	}
	_, s.standalone = cfg.Client.(*redis.Client)
	s.bulk = s.standalone && !cfg.perKey
	s.epochKey = epochKey(cfg.Prefix)
	for i := range s.markers {
		s.markers[i] = string(keyname.Encode([]byte(cfg.Prefix+":bulk:"), cfg.InstanceID)) + ":" + strconv.Itoa(i)
	}
	s.markerTTL.Store(max(s.markerTTL.Load(), 2*cfg.InstanceTTL.Milliseconds()))
	s.instances.Store(1)
	s.fleet = syncport.Fleet{Instances: 1}
	return s, nil
}

// Start registers the instance (one round trip, bounded by ctx; none after
// Check, whose result stands) and starts the background loop. A failed
// registration is returned, but the loop starts anyway and keeps trying: the
// limiter works on its failure mode meanwhile.
func (s *Syncer) Start(ctx context.Context) error {
	if s.closed.Load() {
		return syncport.ErrClosed
	}
	var err error
	if s.checked.Load() {
		err = s.fleetView().Err
	} else if err = s.heartbeat(ctx); !refused(err) {
		s.setHealth(err == nil, err)
	}
	s.start.Do(func() {
		s.running.Store(true)
		go s.loop()
	})
	return err
}

// Now returns the current time on the store clock, in ns.
func (s *Syncer) Now() int64 { return s.localNow() + s.offset.Load() }

// localNow is the local clock in ns since the Unix epoch.
func (s *Syncer) localNow() int64 {
	if s.cfg.Clock != nil {
		return s.cfg.Clock.Now().UnixNano()
	}
	return s.baseN + int64(time.Since(s.base))
}

// localTime returns the local clock's time (Config.Clock, or the system clock
// with its monotonic reading).
func (s *Syncer) localTime() time.Time {
	if s.cfg.Clock != nil {
		return s.cfg.Clock.Now()
	}
	return time.Now()
}

// Stats returns the counters.
func (s *Syncer) Stats() syncport.Stats {
	return syncport.Stats{
		Cycles:        s.stats.cycles.Load(),
		UrgentCycles:  s.stats.urgentCycles.Load(),
		EarlySyncs:    s.stats.earlySyncs.Load(),
		Deferred:      s.stats.deferred.Load(),
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
		Offset:        time.Duration(s.offset.Load()),
		Healthy:       s.healthy.Load(),
		Rebuilds:      s.stats.rebuilds.Load(),
		Waits: syncport.Waits{
			Near:  s.stats.waits[syncport.WhyNear].Load(),
			New:   s.stats.waits[syncport.WhyNew].Load(),
			Start: s.stats.waits[syncport.WhyStart].Load(),
			Lease: s.stats.waits[syncport.WhyLease].Load(),
			Cap:   s.stats.waits[syncport.WhyCap].Load(),
		},
	}
}

// Flush runs a full cycle now and waits for it: everything admitted so far is
// pushed and every key's totals pulled, unless the store fails.
func (s *Syncer) Flush(ctx context.Context) error {
	if s.closed.Load() || !s.running.Load() {
		return syncport.ErrClosed
	}
	ch := make(chan error, 1)
	select {
	case s.flushReq <- flushRequest{err: ch}:
	case <-s.stopped:
		return syncport.ErrClosed
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
// Waiting reservations fail with syncport.ErrClosed. It is idempotent.
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
		case s.flushReq <- flushRequest{err: ch, last: true}:
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
	s.failWaiters(syncport.ErrClosed)
	if s.healthy.Load() {
		if derr := s.deregister(ctx); err == nil {
			err = derr
		}
	}
	return err
}

// flushCycles bounds the cycles of a flush.
const flushCycles = 3

// flush ends every lease, so that the store counts what was admitted, and
// syncs every key, needed or not, until nothing is outstanding: a cycle can
// leave work that only a next one sends, the corrections it queued while
// settling replies (a check refunded while its count was on its way, a
// reservation the store admitted for a caller that had given up) and a
// bulk call whose reply it could not read. At most flushCycles cycles; the
// first error ends it.
func (s *Syncer) flush() error {
	s.releaseOver(s.Now(), true)
	s.flushing = true
	defer func() { s.flushing = false }()
	for i := range flushCycles {
		if err := s.observedCycle(); err != nil {
			// A reply that said the store lost its data is no failure
			// of the flush: the next cycle restores, then syncs
			// (rebuild.go).
			if !errors.Is(err, errStoreLost) || i == flushCycles-1 {
				return err
			}
			continue
		}
		if !s.outstanding() {
			break
		}
	}
	return nil
}

// outstanding reports whether the syncer holds anything for the store: a
// bulk call to resend, a key with an unanswered call or a correction, or a
// refund.
func (s *Syncer) outstanding() bool {
	if len(s.unacked) > 0 || len(s.state) > 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.refunds) > 0
}

// flushRequest asks the loop for a flush (Flush, Close) and takes its
// error. last is Close's: the loop stops right after it, before anything
// else it has due (a lease-ahead pass, an early sync) can lease units that
// no later flush would give back.
type flushRequest struct {
	err  chan error
	last bool
}

func (s *Syncer) loop() {
	defer close(s.stopped)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	pass := time.NewTimer(s.passWait())
	defer pass.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			if s.observedCycle(); s.lost != "" {
				_ = s.observedCycle() // a loss seen: restore at once (rebuild.go)
			}
			pass.Reset(s.passWait()) // a rule may have been added
		case <-pass.C:
			s.returnPass()
			s.leaseAhead()
			pass.Reset(s.passWait())
		case <-s.wake:
			s.serveUrgent()
		case req := <-s.flushReq:
			req.err <- s.flush()
			if req.last {
				return // nothing may be leased after Close's flush
			}
		}
	}
}
