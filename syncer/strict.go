package syncer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/keyname"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/policy"
)

// gcraRule and logRule are the Strict rules of the per-key algorithms
// (TokenBucket and GCRA, SlidingLog): every check is one call of the
// algorithm's own script (gcrascript.go, logscript.go), which decides it on
// the store's clock (Redis TIME inside the script) and the key's state in
// the store. They share nothing with the window rules' sync: no pending
// counts, no reservations queued for the loop. A check calls the store from
// its own goroutine and waits at most Config.Timeout or its context's
// deadline, whichever comes first, whether or not the client's socket reads
// honour context deadlines.
//
// A check whose wait ends before the reply (syncport.ErrTimeout, a cancelled
// context) may still have been admitted by the store: the store then
// counts a unit the caller did not get, which errs on the safe side. A
// failed round trip other than a Redis error reply marks the store
// unhealthy, as a failed sync does; the next heartbeat marks it healthy
// again.
//
// Their Redis keys are "<prefix>:{<rule>:<key>}:<kind>", kind naming the
// algorithm and the parameters its state depends on, so that a rule whose
// parameters change does not read a state of other units; the braces make
// the key its own Redis Cluster hash tag, as the window rules' keys.

// strictRule is what gcraRule and logRule share: the syncer, the key names.
type strictRule struct {
	s      *Syncer
	prefix string // "<prefix>:{<name>:"
	suffix string // "}:<kind>"
}

func (s *Syncer) newStrict(name, kind string) strictRule {
	return strictRule{s: s, prefix: keyname.Tag(s.cfg.Prefix, name), suffix: "}" + kind}
}

// KeyName returns the Redis key of a limiter key of the rule.
func (r *strictRule) KeyName(key string) string {
	b := make([]byte, 0, len(r.prefix)+len(key)+len(r.suffix)+8)
	b = append(b, r.prefix...)
	b = keyname.Encode(b, key)
	b = append(b, r.suffix...)
	return string(b)
}

// call runs script on key with args and returns its reply, waiting at most
// the syncer's Timeout or ctx's deadline.
func (r *strictRule) call(ctx context.Context, script *redis.Script, key string, args ...any) ([]int64, error) {
	s := r.s
	if s.closed.Load() {
		return nil, syncport.ErrClosed
	}
	if !s.healthy.Load() {
		return nil, syncport.ErrUnavailable
	}
	if ctx == nil {
		ctx = context.Background()
	}
	type reply struct {
		v   []int64
		err error
	}
	done := make(chan reply, 1)
	// The round trip gets the operation timeout (at least the check's): a
	// reply that comes after the check gave up still tells the store's
	// health.
	op, cancel := context.WithTimeout(s.life, max(s.cfg.OpTimeout, s.cfg.Timeout))
	keys := []string{r.KeyName(key)}
	s.stats.roundTrips.Add(1)
	s.stats.commands.Add(1)
	go func() {
		defer cancel()
		start := time.Now()
		v, err := script.Run(op, s.cfg.Client, keys, args...).Int64Slice()
		s.heard(err)
		if s.cfg.Observer != nil {
			s.cfg.Observer.Urgent(start, time.Since(start), 1, 1, err)
		}
		if err != nil {
			s.failed(err)
			var rerr redis.Error
			if !errors.As(err, &rerr) && !errors.Is(err, context.Canceled) {
				s.setHealth(false, fmt.Errorf("syncer: strict check: %w", err))
			}
		} else {
			s.stats.reservations.Add(1)
		}
		done <- reply{v, err}
	}()
	timer := time.NewTimer(s.cfg.Timeout)
	defer timer.Stop()
	select {
	case rep := <-done:
		if rep.err != nil {
			var rerr redis.Error
			if errors.As(rep.err, &rerr) {
				return nil, fmt.Errorf("syncer: strict check of %q: %w", keys[0], rep.err)
			}
			// The cause is not wrapped: a deadline of the round trip's own
			// is not the caller's context ending.
			return nil, fmt.Errorf("%w: %v", syncport.ErrUnavailable, rep.err)
		}
		return rep.v, nil
	case <-timer.C:
		s.timedOut()
		return nil, syncport.ErrTimeout
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		return nil, syncport.ErrClosed
	}
}

// storeTime turns the script's TIME (seconds, microseconds) into ns.
func storeTime(sec, usec int64) int64 { return sec*int64(time.Second) + usec*int64(time.Microsecond) }

// gcraRule is a TokenBucket or GCRA rule in Strict mode: each check is one
// call of gcraScript.
type gcraRule struct {
	strictRule
	interval int64
	tau      int64
}

// addGCRA returns the rule named name of a GCRA with emission interval (ns)
// and burst, whose keys' states are kept in the store. The store decides on
// a capacity of store units: burst for a Strict rule; for an Eventual rule,
// whose instances hold leases, the shared bucket's (window.SplitBucket).
// Its keys are those of the Strict rule of the same interval and burst, so a
// rule that changes mode keeps its keys' states. It may be called before or
// after Start.
func (s *Syncer) addGCRA(name string, interval, burst, store int64) (*gcraRule, error) {
	switch {
	case interval < 1 || burst < 1 || store < 1:
		return nil, fmt.Errorf("syncer: rule %q: GCRA interval %d ns, burst %d and store capacity %d must be positive", name, interval, burst, store)
	case max(burst, store) > int64(policy.MaxStrictTolerance)/interval:
		return nil, fmt.Errorf("syncer: rule %q: Burst·Interval %d·%v exceeds %v", name, max(burst, store), time.Duration(interval), policy.MaxStrictTolerance)
	}
	return &gcraRule{strictRule: s.newStrict(name, keyname.GCRA(interval, burst)), interval: interval, tau: store * interval}, nil
}

// Decide asks the store to decide cost n for key; with peek it decides
// nothing and records nothing, and Admitted reports whether one unit fits.
func (r *gcraRule) Decide(ctx context.Context, key string, n int64, peek bool) (syncport.GCRAAnswer, error) {
	p := "0"
	if peek {
		p, n = "1", 1
	}
	return r.run(ctx, key, n, p, 0)
}

// lease asks the store to decide cost n for key and, if it admits it, to
// lease up to want more units (as many as the bucket holds after n): they
// are taken from the key's bucket in the same step, and Leased says how
// many. A call whose wait ends before the reply may still have taken them.
func (r *gcraRule) lease(ctx context.Context, key string, n, want int64) (syncport.GCRAAnswer, error) {
	return r.run(ctx, key, n, "0", max(want, 0))
}

// LeaseAbove is lease with a floor and a charge. The floor is tat, the
// key's TAT as the store last told this instance (ns, store clock; 0 or
// less for none): a store whose TAT for key is below it lost the key, and
// decides on tat instead and records from it (gcraScript), so that a store
// that lost its data does not hand out the same units again. The charge is
// owed, units the failure mode admitted for key meanwhile: the store takes
// them from the bucket first, whatever it decides, so that the units it
// refilled while it did not answer are not spent twice.
func (r *gcraRule) LeaseAbove(ctx context.Context, key string, n, want, tat, owed int64) (syncport.GCRAAnswer, error) {
	if tat <= 0 && owed == 0 {
		return r.lease(ctx, key, n, want)
	}
	// A floor of 0 0 is none, a charge of 0 none (gcraScript).
	t := max(tat, 0)
	return r.run(ctx, key, n, "0", max(want, 0), t/int64(time.Second), t%int64(time.Second), owed)
}

// run calls gcraScript, with a floor's seconds and nanoseconds and a charge
// if given.
func (r *gcraRule) run(ctx context.Context, key string, n int64, peek string, want int64, floor ...any) (syncport.GCRAAnswer, error) {
	v, err := r.call(ctx, gcraScript, key, append([]any{r.interval, r.tau, n, peek, want}, floor...)...)
	if err != nil {
		return syncport.GCRAAnswer{}, err
	}
	return gcraAnswer(v)
}

// gcraAnswer reads gcraScript's reply.
func gcraAnswer(v []int64) (syncport.GCRAAnswer, error) {
	if len(v) != 5 {
		return syncport.GCRAAnswer{}, fmt.Errorf("syncer: gcra script: unexpected reply %v", v)
	}
	at := storeTime(v[1], v[2])
	return syncport.GCRAAnswer{Admitted: v[0] == 1, At: at, TAT: at + v[3], Leased: v[4]}, nil
}

// logRule is a SlidingLog rule in Strict mode: each check is one call of
// logScript.
type logRule struct {
	strictRule
	windowUs int64
	limit    int64
}

// addLog returns the Strict rule named name of a sliding log of limit
// units per window (a whole number of µs): its keys' logs are kept in the
// store. It may be called before or after Start.
func (s *Syncer) addLog(name string, window time.Duration, limit int64) (*logRule, error) {
	if window < time.Microsecond || window%time.Microsecond != 0 || limit < 1 {
		return nil, fmt.Errorf("syncer: rule %q: sliding log of %d per %v: the window must be a positive whole number of µs, the limit positive", name, limit, window)
	}
	us := int64(window / time.Microsecond)
	return &logRule{strictRule: s.newStrict(name, keyname.Log(us)), windowUs: us, limit: limit}, nil
}

// Decide asks the store to decide cost n for key; with peek it decides
// nothing and records nothing (expired units may still be dropped), and
// Admitted reports whether one unit fits.
func (r *logRule) Decide(ctx context.Context, key string, n int64, peek bool) (syncport.LogAnswer, error) {
	p := "0"
	if peek {
		p, n = "1", 1
	}
	v, err := r.call(ctx, logScript, key, r.windowUs, r.limit, n, p)
	if err != nil {
		return syncport.LogAnswer{}, err
	}
	if len(v) != 5 {
		return syncport.LogAnswer{}, fmt.Errorf("syncer: log script: unexpected reply %v", v)
	}
	us := func(x int64) int64 {
		if x < 0 {
			return -1
		}
		return x * int64(time.Microsecond)
	}
	return syncport.LogAnswer{Admitted: v[0] == 1, At: us(v[1]), Count: v[2], Newest: us(v[3]), Retry: us(v[4])}, nil
}
