package syncer

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/window"
)

// Keys is one rule's local key state, as the syncer needs it: the keys
// admitted to since the last drain, their unacknowledged counts, and where to
// hand back what the store acknowledged and returned. localcache.Table
// implements it. The syncer owns this interface; the local state does not
// know the syncer.
type Keys interface {
	// Drain appends the keys admitted to since the last Drain. Only the
	// syncer's loop calls it.
	Drain(dst []Handle) []Handle
	// Key returns h's key.
	Key(h Handle) string
	// Pending appends h's unacknowledged counts in buckets still inside the
	// window at now.
	Pending(h Handle, now int64, dst []window.Bucket) []window.Bucket
	// Settle records a sync of h: the totals of buckets first, first+1, …
	// as the store returned them (a lease granted is in them), the counts it
	// acknowledged, and the lease it granted: lease.Count units in bucket
	// lease.Index (0 units: none). It returns acknowledged units that are
	// no longer pending (refunded after Pending read them), for a negative
	// correction.
	Settle(h Handle, now int64, acked []window.Bucket, first int64, totals []int64, lease window.Bucket) (over []window.Bucket)
	// Release ends h's lease of bucket j if that bucket is over at now (as
	// the checks see the time too), or with force: the units it covered
	// leave the pending counts (the store counted them at the grant), and
	// the units it did not use are returned, for the syncer to push as a
	// negative correction of bucket j. done is false while the bucket is
	// not over (the lease stays); true once it is ended, or if h holds none.
	Release(h Handle, j, now int64, force bool) (unused int64, done bool)
	// Want returns how many units h should ask the store to lease it at
	// now: in proportion to what it has admitted in the current bucket, so
	// that unused units, which count in the window until they are given
	// back, stay below what it used.
	Want(h Handle, now int64) int64
	// MarkDirty queues h for the next Drain again.
	MarkDirty(h Handle)
}

// Handle is an opaque reference to one key's local state: the syncer only
// passes back what Keys gave it. It is an alias of any so that Keys can be
// implemented without importing this package.
type Handle = any

// RuleConfig describes one rule to the syncer.
type RuleConfig struct {
	// Name is the rule's name, part of its Redis keys.
	Name string
	// Geometry is the rule's window geometry; its sub-window must be a whole
	// number of microseconds.
	Geometry window.Sliding
	// Limit is the rule's limit per window: reservations are decided
	// against it.
	Limit int64
	// Keys is the rule's local key state.
	Keys Keys
	// Leases makes every per-key call of the rule ask the store for a lease
	// (Eventual rules; see syncScript).
	Leases bool
}

// Rule is one rule of a Syncer, created by New: its Redis key names and its
// reservations.
type Rule struct {
	s     *Syncer
	name  string
	geo   window.Sliding
	limit int64
	keys  Keys

	prefix string // "<prefix>:{<name>:"
	suffix string // "}:<sub µs>"
	ttlMs  int64
	subUs  int64
	span   int
	weigh  string // the sync script's flag: "1" if the oldest bucket is weighted
	leases bool
}

func (s *Syncer) newRule(rc RuleConfig) (*Rule, error) {
	sub := rc.Geometry.Sub()
	switch {
	case rc.Keys == nil:
		return nil, fmt.Errorf("syncer: rule %q: Keys is nil", rc.Name)
	case sub < int64(time.Microsecond) || sub%int64(time.Microsecond) != 0:
		return nil, fmt.Errorf("syncer: rule %q: sub-window %v is not a whole number of microseconds", rc.Name, time.Duration(sub))
	}
	for _, r := range s.rules {
		if r.name == rc.Name {
			return nil, fmt.Errorf("syncer: rule %q: duplicate name", rc.Name)
		}
	}
	r := &Rule{
		s:      s,
		name:   rc.Name,
		geo:    rc.Geometry,
		limit:  rc.Limit,
		keys:   rc.Keys,
		prefix: s.cfg.Prefix + ":{" + rc.Name + ":",
		suffix: "}:" + strconv.FormatInt(sub/1000, 10),
		subUs:  sub / 1000,
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
	return r, nil
}

// AddRule adds a rule before Start and returns its handle.
func (s *Syncer) AddRule(rc RuleConfig) (*Rule, error) {
	if s.running.Load() || s.closed.Load() {
		return nil, fmt.Errorf("syncer: rule %q: rules are added before Start", rc.Name)
	}
	r, err := s.newRule(rc)
	if err != nil {
		return nil, err
	}
	s.rules = append(s.rules, r)
	s.markerTTL = max(s.markerTTL, 2*r.ttlMs)
	return r, nil
}

// Rule returns the rule named name, or nil.
func (s *Syncer) Rule(name string) *Rule {
	for _, r := range s.rules {
		if r.name == name {
			return r
		}
	}
	return nil
}

// Name returns the rule's name.
func (r *Rule) Name() string { return r.name }

// Healthy reports whether the rule's store is healthy (see Syncer.Healthy).
func (r *Rule) Healthy() bool { return r.s.Healthy() }

// Reserve asks the store to decide cost n for key and waits for the answer
// (see Syncer.Reserve).
func (r *Rule) Reserve(ctx context.Context, key string, h Handle, n int64) (Answer, error) {
	return r.s.Reserve(ctx, r, key, h, n)
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

// fieldBound is how many fields a key's hash may hold before bulkScript
// cleans it, which it checks only when a push starts a bucket: the window's
// buckets and the one that just left it. A busy key is then cleaned every
// other bucket and holds about span fields, as the sync script keeps it
// (per-key bookkeeping fields make it clean at every new bucket: one HKEYS
// per key per sub-window).
func (r *Rule) fieldBound() int { return r.span + 1 }
