package syncer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/apierr"
	"github.com/sluicehq/sluice/internal/syncport"
)

// A store can fail in three ways that the failure mode covers, and the
// syncer tells them apart for the operator (Fleet.Err wraps the sentinel):
//
//   - unreachable: a network error, a timeout, a hung store (deadline.go).
//     Healthy again at the first registry round trip that succeeds.
//   - it refuses writes (syncport.ErrWritesRefused): out of memory under noeviction
//     ("OOM command not allowed"), a read-only replica (READONLY), a failed
//     snapshot with stop-writes-on-bgsave-error (MISCONF). The store still
//     answers reads, so a cycle's read-only registry look would succeed and
//     make it healthy for a moment, until the next write failed again; and
//     each return to health starts the engines' recovery grace, which holds
//     keys back. So a refusal is a state with hysteresis: entered at the
//     first refusal of any round trip, left only after okCycles cycles in a
//     row (at least refusedCycles, spanning refusedFor) whose writes the
//     store accepted (every push of the cycle and its closing heartbeat, a
//     write), with no failure between them.
//   - it refuses this client (apierr.ErrStoreConfig): authentication (NOAUTH,
//     WRONGPASS), permissions (NOPERM, an ACL that forbids a command or a
//     key inside a script), an unknown command (scripting disabled or
//     renamed), protected mode (DENIED). Check reports it at start-up with
//     what to change; later (permissions revoked) it is handled as a
//     refusal of writes, with the same hysteresis.

// ACLCommands are the commands a Redis ACL user must be allowed for sluice:
// the ones it sends and the ones its scripts run.
const ACLCommands = "+ping +evalsha +eval +script|load +hgetall +time +get +set +hget +hset +hincrby +hdel +hkeys +hlen +pexpire +zadd +zrem +zcard +zrange +zremrangebyscore +zscore +rpush +lindex +llen +ltrim"

// refusedCycles is how many cycles in a row, at least, must have their
// writes accepted before a store that refused writes is healthy again;
// refusedFor is the least time those cycles must span (at the cycle
// period).
const (
	refusedCycles = 3
	refusedFor    = time.Second
)

// okCycles is how many good cycles in a row end a refusal.
func (s *Syncer) okCycles() int64 {
	return max(refusedCycles, int64((refusedFor+s.cfg.Interval-1)/s.cfg.Interval))
}

// classify wraps err, a round trip's error, with apierr.ErrStoreConfig (and what to
// change) or syncport.ErrWritesRefused if it is one of those; else it returns err.
func (s *Syncer) classify(err error) error {
	var rerr redis.Error
	if err == nil || errors.Is(err, apierr.ErrStoreConfig) || errors.Is(err, syncport.ErrWritesRefused) || !errors.As(err, &rerr) {
		return err
	}
	msg := rerr.Error()
	word, _, _ := strings.Cut(msg, " ")
	switch {
	case word == "OOM":
		return fmt.Errorf("%w (out of memory: raise maxmemory, pick an eviction policy other than noeviction, or free memory): %w", syncport.ErrWritesRefused, err)
	case word == "READONLY":
		return fmt.Errorf("%w (a read-only replica: point the client at the master): %w", syncport.ErrWritesRefused, err)
	case word == "MISCONF":
		return fmt.Errorf("%w (it cannot persist to disk: fix its snapshot or AOF, see its log): %w", syncport.ErrWritesRefused, err)
	case word == "NOAUTH":
		return fmt.Errorf("%w: it requires authentication: set Password (and Username for an ACL user) in the client's options (redis.Options): %w", apierr.ErrStoreConfig, err)
	case word == "WRONGPASS":
		return fmt.Errorf("%w: wrong credentials: set the right Username and Password in the client's options (redis.Options): %w", apierr.ErrStoreConfig, err)
	case word == "DENIED":
		return fmt.Errorf("%w: protected mode: set a password on the store (requirepass or an ACL user) and in the client's options: %w", apierr.ErrStoreConfig, err)
	case strings.Contains(msg, "can't access at least one of the keys"), word == "NOPERM" && strings.Contains(msg, "keys"):
		return fmt.Errorf("%w: the ACL user may not use the keys under Prefix: grant it ~%s:* (ACL SETUSER <user> ~%s:*): %w", apierr.ErrStoreConfig, s.cfg.Prefix, s.cfg.Prefix, err)
	case word == "NOPERM", strings.Contains(msg, "can't run this command"):
		return fmt.Errorf("%w: the ACL user may not run a command sluice needs: grant it the commands and keys (ACL SETUSER <user> %s ~%s:*): %w", apierr.ErrStoreConfig, ACLCommands, s.cfg.Prefix, err)
	case strings.HasPrefix(msg, "ERR unknown command"):
		return fmt.Errorf("%w: a command sluice needs is disabled or renamed (rename-command): sluice needs EVALSHA, EVAL and SCRIPT LOAD (Lua scripting): %w", apierr.ErrStoreConfig, err)
	}
	return err
}

// causeOf is the kind of a health error: 0 none, 1 unreachable, 2 refuses
// writes, 3 refuses this client.
func causeOf(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, apierr.ErrStoreConfig):
		return 3
	case errors.Is(err, syncport.ErrWritesRefused):
		return 2
	}
	return 1
}

// refused reports whether err puts the store in the refusal state: it
// refuses writes or this client.
func refused(err error) bool {
	return errors.Is(err, syncport.ErrWritesRefused) || errors.Is(err, apierr.ErrStoreConfig)
}

// refuse enters the refusal state for err (classified): the store is down
// for the checks until okCycles good cycles in a row (accepted).
func (s *Syncer) refuse(err error) {
	s.refusals.Add(1)
	s.refusing.Store(true)
	s.down(err)
}

// accepted records a cycle that ended with the store accepting its writes,
// where mark was the count of refusals when it started; it reports whether
// the refusal state is over.
func (s *Syncer) accepted(mark int64) bool {
	if s.refusals.Load() != mark {
		s.goodCycles = 0
		return false
	}
	if mark != s.streak {
		// Refused since the last good cycle (in a cycle that ended early).
		s.goodCycles, s.streak = 0, mark
	}
	s.goodCycles++
	if s.goodCycles < s.okCycles() {
		return false
	}
	s.goodCycles = 0
	s.refusing.Store(false)
	if s.refusals.Load() != mark { // a Strict check's refusal meanwhile
		s.refusing.Store(true)
		return false
	}
	return true
}

// Check checks the store once, bounded by ctx: it registers the instance (a
// script call on a key under Prefix, which writes), sends a PING and reads a
// key under Prefix (HGETALL) as the syncer does outside its scripts, and
// loads the scripts (SCRIPT LOAD). Its error wraps apierr.ErrStoreConfig if the
// store refuses this client (credentials, ACL permissions on the commands
// or the keys, scripting disabled), with what to change; syncport.ErrWritesRefused if
// it refuses writes; else it is a failure to reach the store. The syncer's
// health follows: Start, after Check, begins from it without another round
// trip.
func (s *Syncer) Check(ctx context.Context) error {
	if s.closed.Load() {
		return syncport.ErrClosed
	}
	err := s.heartbeat(ctx)
	// What the syncer sends outside its scripts: the probe's PING and the
	// bulk path's pulls (a read of a key under Prefix); then the scripts.
	steps := []func() (string, error){
		func() (string, error) { return "ping", s.cfg.Client.Ping(ctx).Err() },
		func() (string, error) { return "pull", s.cfg.Client.HGetAll(ctx, s.cfg.Prefix+":{check}").Err() },
	}
	for _, sc := range []*redis.Script{syncScript, bulkScript, gcraScript, logScript} {
		steps = append(steps, func() (string, error) { return "script load", sc.Load(ctx, s.cfg.Client).Err() })
	}
	for _, step := range steps {
		if err != nil {
			break
		}
		if what, serr := step(); serr != nil {
			s.heard(serr)
			err = s.failed(fmt.Errorf("syncer: %s: %w", what, serr))
		}
	}
	if !refused(err) { // a refusal is set by failed
		s.setHealth(err == nil, err)
	}
	s.checked.Store(true)
	return err
}
