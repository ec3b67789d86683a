package syncer

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/keyname"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/window"
)

// handle is an opaque reference to one key's local state: the syncer only
// passes back what syncport.Keys gave it.
type handle = any

// windowRule is one rule of a Syncer, created by New: its Redis key names and its
// reservations.
type windowRule struct {
	s     *Syncer
	name  string
	geo   window.Sliding
	limit atomic.Int64 // SetLimit changes it
	keys  syncport.Keys

	prefix string // "<prefix>:{<name>:"
	suffix string // "}" + keyname.Suffix: "}:<sub µs>", or "}:<period>@<zone>" for a calendar
	ttlMs  int64
	span   int
	weigh  string // the sync script's flag: "1" if the oldest bucket is weighted
	// head is the start of every syncScript call's ARGV that never changes
	// (sub-window µs, span, ttl ms, instance id), boxed once: boxing them
	// at every call allocated for each (args).
	head [4]any
	// limitArg is the limit as last boxed for a call, with its value:
	// boxed again only when SetLimit changed it. Owned by the syncer's loop.
	limitArg   any
	limitBoxed int64
	leases     bool
	// cal reports a calendar quota, and calArg is the scripts' bucket
	// argument for its period last asked (subArg).
	cal    bool
	calArg atomic.Pointer[periodArg]
	// ahead is the last bucket whose keys were leased the next one
	// (ahead.go); owned by the syncer's loop.
	ahead int64
	// returned is the last bucket whose start ended the leases of the
	// bucket before (returns.go); owned by the syncer's loop.
	returned int64
}

func (s *Syncer) newRule(rc syncport.RuleConfig) (*windowRule, error) {
	sub := rc.Geometry.Sub()
	switch {
	case rc.Keys == nil:
		return nil, fmt.Errorf("syncer: rule %q: Keys is nil", rc.Name)
	case sub < int64(time.Microsecond) || sub%int64(time.Microsecond) != 0:
		return nil, fmt.Errorf("syncer: rule %q: sub-window %v is not a whole number of microseconds", rc.Name, time.Duration(sub))
	}
	_, zone := rc.Geometry.Period()
	r := &windowRule{
		s:      s,
		name:   rc.Name,
		geo:    rc.Geometry,
		keys:   rc.Keys,
		prefix: keyname.Tag(s.cfg.Prefix, rc.Name),
		suffix: "}" + keyname.Suffix(rc.Geometry),
		cal:    zone != nil,
		span:   rc.Geometry.Span(),
		leases: rc.Leases,
		weigh:  "0",
		// Keep a key while anything in it can still count, plus a margin
		// for clock offsets.
		ttlMs: (int64(rc.Geometry.Window())+sub)/int64(time.Millisecond) + 1000,
	}
	if rc.Geometry.Weighted() {
		r.weigh = "1"
	}
	r.head = [4]any{sub / 1000, r.span, r.ttlMs, s.cfg.InstanceID}
	r.limit.Store(rc.Limit)
	return r, nil
}

// addRule adds a rule and returns its handle. Rules may be added while the
// syncer runs: the next cycle syncs the new rule's keys. A rule added while
// one of the same name runs (a limiter replacing a rule whose geometry
// changed) syncs beside it until the old one is retired; New refuses
// duplicate names.
func (s *Syncer) addRule(rc syncport.RuleConfig) (syncport.WindowStore, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("syncer: rule %q: %w", rc.Name, syncport.ErrClosed)
	}
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	r, err := s.newRule(rc)
	if err != nil {
		return nil, err
	}
	r.keys.OnEarly(s.askEarly)
	s.rules = append(s.rules[:len(s.rules):len(s.rules)], r)
	for old := s.markerTTL.Load(); old < 2*r.ttlMs && !s.markerTTL.CompareAndSwap(old, 2*r.ttlMs); old = s.markerTTL.Load() {
	}
	return r, nil
}

// Retire takes r out of the sync: the next cycle pushes its dirty keys
// one last time (keys with something outstanding stay until it is
// settled), then r is forgotten and a rule of the same name may be added.
// Its table must take no more checks.
func (r *windowRule) Retire() {
	s := r.s
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	for i, x := range s.rules {
		if x == r {
			s.rules = append(s.rules[:i:i], s.rules[i+1:]...)
			s.retired = append(s.retired, r)
			return
		}
	}
}

// periodArg is a calendar period's bucket argument for the scripts, boxed.
type periodArg struct {
	k int64
	v any
}

// subArg returns the scripts' bucket argument at now (luaBucket): the
// sub-window in µs, or for a calendar quota its period at now and the
// period's bounds in µs, made once per period.
func (r *windowRule) subArg(now int64) any {
	if !r.cal {
		return r.head[0]
	}
	k := r.geo.Index(now)
	if a := r.calArg.Load(); a != nil && a.k == k {
		return a.v
	}
	start, end := r.geo.Start(k), r.geo.Start(k+1)
	a := &periodArg{k: k, v: "c" + strconv.FormatInt(k, 10) + "," + strconv.FormatInt(start/1000, 10) + "," + strconv.FormatInt(end/1000, 10)}
	r.calArg.Store(a)
	return a.v
}

// limitValue returns the limit for a script call, boxed.
func (r *windowRule) limitValue() any {
	if l := r.limit.Load(); r.limitArg == nil || l != r.limitBoxed {
		r.limitArg, r.limitBoxed = l, l
	}
	return r.limitArg
}

// SetLimit changes the limit the store decides r's reservations against.
func (r *windowRule) SetLimit(limit int64) { r.limit.Store(limit) }

// ruleList returns the rules, and under the lock's hand-off the slice is
// never written again (addRule and Retire copy).
func (s *Syncer) ruleList() []*windowRule {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	return s.rules
}

// drainList returns the rules to drain this cycle: the rules and those
// retired since the last cycle, which it forgets.
func (s *Syncer) drainList() []*windowRule {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	if len(s.retired) == 0 {
		return s.rules
	}
	out := append(s.rules[:len(s.rules):len(s.rules)], s.retired...)
	s.retired = nil
	return out
}

// Health is the rule's Syncer's health, for the caller to load per check
// (see Syncer.isHealthy).
func (r *windowRule) Health() *atomic.Bool { return &r.s.healthy }

// OldestHeartbeat is the rule's Syncer's oldestHeartbeat.
func (r *windowRule) OldestHeartbeat() int64 { return r.s.oldestHeartbeat() }

// Joining is the rule's Syncer's isJoining.
func (r *windowRule) Joining() bool { return r.s.isJoining() }

// InstanceTTL is how long a silent instance stays in the rule's Syncer's
// registry (Config.InstanceTTL).
func (r *windowRule) InstanceTTL() time.Duration { return r.s.cfg.InstanceTTL }

// Reserve asks the store to decide cost n for key and waits for the answer
// (see Syncer.reserve).
func (r *windowRule) Reserve(ctx context.Context, key string, h handle, n int64) (syncport.Answer, error) {
	return r.s.reserve(ctx, r, key, h, n)
}

// Waited counts a check of the rule that had no local allowance left and is
// handed to the store (Reserve), by why (Stats.Waits).
func (r *windowRule) Waited(why syncport.Why) {
	if why < syncport.NumWhy {
		r.s.stats.waits[why].Add(1)
	}
}

// keyName returns the Redis key of a limiter key: "<prefix>:{<rule>:<key>}:<sub-window µs>"
// ("...}:<period>@<zone>" for a calendar quota),
// with the key percent-encoded (see keyname.Encode). The braces make it a Redis
// Cluster hash tag, so everything of one limiter key lives in one slot; the
// sub-window length keeps rules whose geometry changed from mixing buckets.
func (r *windowRule) keyName(key string) string {
	b := r.appendKeyName(make([]byte, 0, len(r.prefix)+len(key)+len(r.suffix)+8), key)
	return string(b)
}

// appendKeyName appends the Redis key of a limiter key (see keyName) to dst.
func (r *windowRule) appendKeyName(dst []byte, key string) []byte {
	dst = append(dst, r.prefix...)
	dst = keyname.Encode(dst, key)
	return append(dst, r.suffix...)
}

// fieldBound is how many fields a key's hash may hold before bulkScript
// cleans it, which it checks only when a push starts a bucket: the window's
// buckets and the one that just left it. A busy key is then cleaned every
// other bucket and holds about span fields, as the sync script keeps it
// (per-key bookkeeping fields make it clean at every new bucket: one HKEYS
// per key per sub-window).
func (r *windowRule) fieldBound() int { return r.span + 1 }
