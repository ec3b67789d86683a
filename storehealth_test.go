package sluice_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/syncer"
)

// userClient returns a client of srv that authenticates as user (none if
// empty) with password (none if empty), closed in t.Cleanup.
func userClient(t *testing.T, addr, user, password string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: addr, Username: user, Password: password,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		DialerRetries:            1, // one dial per attempt: an unreachable store fails fast
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// aclUser creates an ACL user on srv with password "pw" and rules.
func aclUser(t *testing.T, admin *redis.Client, name string, rules ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">pw"}
	for _, r := range strings.Fields(strings.Join(rules, " ")) {
		args = append(args, r)
	}
	require.NoError(t, admin.Do(context.Background(), args...).Err())
}

// unreachable returns a loopback address with nothing listening.
func unreachable(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// healthRules are a rule of each kind of store script: an Eventual window
// (sync and bulk scripts), an Eventual bucket and a Strict one (the GCRA
// script), a Strict log (the log script).
var healthRules = []policy.Rule{
	{Name: "window", Limit: 100, Window: time.Minute},
	{Name: "bucket", Limit: 100, Window: time.Minute, Algorithm: policy.TokenBucket},
	{Name: "gcra", Limit: 100, Window: time.Minute, Algorithm: policy.GCRA, Mode: policy.Strict},
	{Name: "log", Limit: 100, Window: time.Minute, Algorithm: policy.SlidingLog, Mode: policy.Strict},
}

// TestNewStoreConfig: a store that refuses this client is an error of New,
// returned at once (the store answers), wrapping ErrStoreConfig and naming
// the fix: a missing or wrong password, an ACL user without scripting,
// without SCRIPT LOAD, without a command its scripts run, without PING or
// HGETALL (sent outside the scripts), without the keys under Prefix, and
// scripting disabled. An ACL user granted what the error
// names (syncer.ACLCommands and ~<prefix>:*) works.
func TestNewStoreConfig(t *testing.T) {
	t.Parallel()
	open := redistest.Start(t) // the default user has no password: ACL users
	admin := open.Client(t)
	aclUser(t, admin, "noscript", "~* &* +@all -@scripting")
	aclUser(t, admin, "noload", "~* &* +@all -script|load")
	aclUser(t, admin, "nozadd", "~* &* +@all -zadd")
	aclUser(t, admin, "nokeys", "~other:* &* +@all")
	aclUser(t, admin, "noping", "~* &* +@all -ping")
	aclUser(t, admin, "nopull", "~* &* +@all -hgetall")
	aclUser(t, admin, "granted", syncer.ACLCommands, "~app:*")
	locked := redistest.Start(t)
	require.NoError(t, locked.Client(t).ConfigSet(context.Background(), "requirepass", "secret").Err())
	noEval := redistest.Start(t, redistest.WithArgs("--rename-command", "evalsha", ""))

	for _, tc := range []struct {
		name           string
		addr           string
		user, password string
		fix            string // "": New succeeds
	}{
		{"missing password", locked.Addr(), "", "", "set Password"},
		{"wrong password", locked.Addr(), "", "wrong", "set the right Username and Password"},
		{"no scripting", open.Addr(), "noscript", "pw", "ACL SETUSER <user> " + syncer.ACLCommands},
		{"no script load", open.Addr(), "noload", "pw", "+script|load"},
		{"a command of a script", open.Addr(), "nozadd", "pw", "ACL SETUSER <user> " + syncer.ACLCommands},
		{"no keys", open.Addr(), "nokeys", "pw", "grant it ~app:*"},
		{"no ping", open.Addr(), "noping", "pw", "ACL SETUSER <user> " + syncer.ACLCommands},
		{"no hgetall", open.Addr(), "nopull", "pw", "ACL SETUSER <user> " + syncer.ACLCommands},
		{"scripting disabled", noEval.Addr(), "", "", "EVALSHA, EVAL and SCRIPT LOAD"},
		{"granted", open.Addr(), "granted", "pw", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			l, err := sluice.New(sluice.Options{
				Redis:   userClient(t, tc.addr, tc.user, tc.password),
				Prefix:  "app",
				Timeout: 200 * time.Millisecond,
				Logger:  slog.New(slog.DiscardHandler),
			}, healthRules...)
			t.Logf("New returned after %v: %v", time.Since(start), err)
			if tc.fix != "" {
				require.ErrorIs(t, err, sluice.ErrStoreConfig)
				require.Nil(t, l)
				assert.Contains(t, err.Error(), tc.fix)
				return
			}
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			require.False(t, l.Stats().Degraded)
			ctx := context.Background()
			for _, r := range healthRules {
				for range 3 {
					d, err := l.Allow(ctx, r.Name, "k")
					require.NoError(t, err, r.Name)
					require.True(t, d.Allowed, r.Name)
				}
			}
			require.NoError(t, l.Flush(ctx))
			require.False(t, l.Stats().Degraded, "every script runs with the granted commands and keys")
		})
	}
}

// TestNewRequireStore: a store that cannot be reached, or refuses writes,
// is no error of New (the limiter starts on its failure mode, and says why),
// unless Options.RequireStore: then New returns ErrStoreUnavailable.
func TestNewRequireStore(t *testing.T) {
	t.Parallel()
	full := redistest.Start(t)
	require.NoError(t, full.Client(t).ConfigSet(context.Background(), "maxmemory", "1").Err())
	for _, tc := range []struct {
		name, addr, log string
	}{
		{"unreachable", unreachable(t), `msg="sluice: store unreachable`},
		{"out of memory", full.Addr(), `msg="sluice: store refuses writes`},
	} {
		for _, required := range []bool{false, true} {
			t.Run(fmt.Sprint(tc.name, "/require=", required), func(t *testing.T) {
				t.Parallel()
				var buf logbuf.Buffer
				l, err := sluice.New(sluice.Options{
					Redis:        userClient(t, tc.addr, "", ""),
					RequireStore: required,
					Logger:       slog.New(slog.NewTextHandler(&buf, nil)),
				}, policy.Rule{Name: "api", Limit: 10, Window: time.Second})
				if required {
					require.ErrorIs(t, err, sluice.ErrStoreUnavailable)
					require.NotErrorIs(t, err, sluice.ErrStoreConfig)
					require.Nil(t, l)
					return
				}
				require.NoError(t, err)
				t.Cleanup(func() { _ = l.Close() })
				require.True(t, l.Stats().Degraded)
				require.Equal(t, 1, count(buf.String(), tc.log), buf.String())
				d, err := l.Allow(context.Background(), "api", "k")
				require.NoError(t, err)
				require.True(t, d.Allowed, "on the failure mode")
			})
		}
	}
}

// TestDefaultLogger: with Options.Logger nil, the store's failure reaches
// slog.Default() (not parallel: it replaces the default logger).
func TestDefaultLogger(t *testing.T) {
	var buf logbuf.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	l, err := sluice.New(sluice.Options{Redis: userClient(t, unreachable(t), "", "")},
		policy.Rule{Name: "api", Limit: 10, Window: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	require.Eventually(t, func() bool { return strings.Contains(buf.String(), "store unreachable") }, 5*time.Second, 10*time.Millisecond)
	require.Contains(t, buf.String(), "level=WARN")
}

// count returns how many lines of out contain s.
func count(out, s string) int { return strings.Count(out, s) }

// TestPermissionsRevoked: permissions revoked from a running limiter's ACL
// user put it on its failure mode, logged once at Error with the fix;
// granted again, it is healthy once the store has accepted its writes for
// a while, logged once.
func TestPermissionsRevoked(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	aclUser(t, admin, "app", syncer.ACLCommands, "~sluice:*")
	var buf logbuf.Buffer
	l, err := sluice.New(sluice.Options{
		Redis:        userClient(t, srv.Addr(), "app", "pw"),
		SyncInterval: 20 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(&buf, nil)),
	}, policy.Rule{Name: "api", Limit: 1000, Window: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	require.False(t, l.Stats().Degraded)

	aclUser(t, admin, "app", "~sluice:* +@all -zadd") // the heartbeat's
	require.Eventually(t, func() bool { return l.Stats().Degraded }, 5*time.Second, 5*time.Millisecond)
	ctx := context.Background()
	for range 20 {
		d, err := l.Allow(ctx, "api", "k")
		require.NoError(t, err)
		require.True(t, d.Allowed, "on the failure mode")
	}
	time.Sleep(200 * time.Millisecond) // cycles refused
	aclUser(t, admin, "app", syncer.ACLCommands, "~sluice:*")
	// The limiter reports itself healthy, then logs it: wait for the line
	// (the lines of one change are written before the next change's).
	require.Eventually(t, func() bool {
		return !l.Stats().Degraded && count(buf.String(), "reachable again") > 0
	}, 10*time.Second, 5*time.Millisecond)
	out := buf.String()
	assert.Equal(t, 1, count(out, `msg="sluice: store refuses this client`), out)
	assert.Equal(t, 1, count(out, "level=ERROR"), out)
	assert.Contains(t, out, "ACL SETUSER")
	assert.Equal(t, 1, count(out, "reachable again"), out)
	assert.Zero(t, count(out, "store unreachable"), out)
}

// storeTotal returns the sum of key's buckets in the store (the default
// Prefix; key needs no encoding).
func storeTotal(t *testing.T, c *redis.Client, rule policy.Rule, key string) int64 {
	t.Helper()
	h, err := c.HGetAll(context.Background(), fmt.Sprintf("sluice:{%s:%s}:%d", rule.Name, key, rulegeo.SubWindow(rule).Microseconds())).Result()
	require.NoError(t, err)
	var total int64
	for f, v := range h {
		var idx, n int64
		if _, err := fmt.Sscan(f, &idx); err != nil || fmt.Sprint(idx) != f {
			continue // bookkeeping, not a bucket
		}
		_, err := fmt.Sscan(v, &n)
		require.NoError(t, err)
		total += n
	}
	return total
}

// fillMemory sets srv's maxmemory just above what it uses, noeviction, and
// writes until the store refuses: out of memory.
func fillMemory(t *testing.T, admin *redis.Client) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	info, err := admin.InfoMap(ctx, "memory").Result()
	require.NoError(t, err)
	var used int64
	_, err = fmt.Sscan(info["Memory"]["used_memory"], &used)
	require.NoError(t, err)
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", fmt.Sprint(used+1<<20)).Err())
	value := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		require.Less(t, i, 1000, "the store never ran out of memory")
		if err := admin.Set(ctx, fmt.Sprint("filler:", i), value, 0).Err(); err != nil {
			require.ErrorContains(t, err, "OOM")
			break
		}
	}
	// At the edge the store takes small writes again once the refused
	// write's buffer is freed: keep it over.
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", fmt.Sprint(used)).Err())
	require.ErrorContains(t, admin.Set(ctx, "probe", "x", 0).Err(), "OOM")
}

// TestOutOfMemory: a store out of memory (maxmemory, noeviction, filled)
// puts the fleet on its failure mode once, without flapping: each instance
// logs one refusal of writes and, after the memory is freed and the store
// has accepted its writes for a while, one recovery; its health changes
// twice. A key kept under its share is never denied, before, during or
// after, and the store then counts every admission once.
func TestOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	const n = 2
	rule := policy.Rule{Name: "api", Limit: 200, Window: time.Minute} // share 100
	ls := make([]*sluice.Limiter, n)
	logs := make([]*logbuf.Buffer, n)
	for i := range ls {
		logs[i] = new(logbuf.Buffer)
		l, err := sluice.New(sluice.Options{
			Redis:        srv.Client(t),
			SyncInterval: 20 * time.Millisecond,
			ErrorBudget:  0.1,
			MinInstances: n,
			Logger:       slog.New(slog.NewTextHandler(logs[i], nil)),
		}, rule)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		ls[i] = l
	}
	ctx := context.Background()
	var admitted int64
	check := func(phase string, per int, pause time.Duration) {
		for range per {
			for i, l := range ls {
				d, err := l.Allow(ctx, rule.Name, "k")
				require.NoError(t, err)
				require.True(t, d.Allowed, "%s: instance %d denied a key under its share (remaining %d)", phase, i, d.Remaining)
				admitted++
			}
			time.Sleep(pause)
		}
	}
	check("before", 10, 0)
	for _, l := range ls {
		require.NoError(t, l.Flush(ctx))
	}

	fillMemory(t, admin)
	// Health as each instance reports it, sampled every millisecond.
	flips := make([]int, n)
	last := make([]bool, n)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			for i, l := range ls {
				if d := l.Stats().Degraded; d != last[i] {
					flips[i]++
					last[i] = d
				}
			}
		}
	}()
	require.Eventually(t, func() bool { return ls[0].Stats().Degraded && ls[1].Stats().Degraded }, 5*time.Second, 5*time.Millisecond)
	check("out of memory", 30, 20*time.Millisecond) // 0.6 s and more of cycles refused
	for _, l := range ls {
		require.True(t, l.Stats().Degraded, "still on the failure mode")
	}

	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "0").Err())
	require.Eventually(t, func() bool { return !ls[0].Stats().Degraded && !ls[1].Stats().Degraded }, 10*time.Second, 5*time.Millisecond)
	check("after", 10, 0)
	close(stop)
	<-sampled
	// A last sample: the sampler may have stopped before it saw the
	// recovery that the wait above saw.
	for i, l := range ls {
		if d := l.Stats().Degraded; d != last[i] {
			flips[i]++
			last[i] = d
		}
	}
	for i, l := range ls {
		require.NoError(t, l.Flush(ctx))
		out := logs[i].String()
		assert.Equal(t, 1, count(out, `msg="sluice: store refuses writes`), "instance %d:\n%s", i, out)
		assert.Contains(t, out, "OOM")
		assert.Equal(t, 1, count(out, "reachable again"), "instance %d:\n%s", i, out)
		assert.Zero(t, count(out, "store unreachable"), "instance %d:\n%s", i, out)
		assert.Equal(t, 2, flips[i], "instance %d: degraded once, healthy once", i)
	}
	got := storeTotal(t, admin, rule, "k")
	assert.Equal(t, admitted, got, "the store counts every admission once")
}

// TestUntrackedFirstCheckSlowStore: under FailLocal, a check that the
// store, up but hung, does not answer within Timeout is decided as while the
// store is down, within the share L/N̂, also for a key without local state:
// a window's key the key bound keeps out (decided on the rule's sketch of
// untracked keys), an Eventual bucket's key holding no units. Its first
// check is admitted, not denied for want of state.
func TestUntrackedFirstCheckSlowStore(t *testing.T) {
	t.Parallel()
	for _, rule := range []policy.Rule{
		{Name: "api", Limit: 10, Window: time.Minute},                                // share 5
		{Name: "api", Limit: 10, Window: time.Minute, Algorithm: policy.TokenBucket}, // share: 5 at once
	} {
		t.Run(rule.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			l, err := sluice.New(sluice.Options{
				Redis:        srv.Client(t),
				MaxKeys:      2,
				MinInstances: 2,
				Timeout:      100 * time.Millisecond,
				Logger:       slog.New(slog.DiscardHandler),
			}, rule)
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			t.Cleanup(srv.Resume) // runs first
			ctx := context.Background()
			for i := range 40 { // the key bound is full
				_, err := l.Allow(ctx, "api", fmt.Sprint("tracked-", i%2))
				require.NoError(t, err)
			}
			require.Equal(t, int64(2), l.Stats().Keys)

			srv.Pause()
			d, err := l.Allow(ctx, "api", "stranger")
			require.NoError(t, err)
			require.False(t, l.Stats().Degraded, "the store is believed up: the check timed out")
			require.True(t, d.Allowed, "the first check of a key without local state, within its share")
			admitted := 1
			for range 7 {
				d, err := l.Allow(ctx, "api", "stranger")
				require.NoError(t, err)
				if d.Allowed {
					admitted++
				} else {
					assert.Positive(t, d.RetryAfter)
				}
			}
			assert.Equal(t, 5, admitted, "the share L/N̂, no more")
		})
	}
}

// TestReadOnlyReplica: a store that is a read-only replica refuses writes:
// New succeeds on the failure mode (it is no misconfiguration of the
// client: a failover may be under way), logged once as a refusal of writes;
// promoted, it is healthy again, logged once.
func TestReadOnlyReplica(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.Start(t)
	admin := replica.Client(t)
	ctx := context.Background()
	require.NoError(t, admin.Do(ctx, "REPLICAOF", "127.0.0.1", fmt.Sprint(master.Port())).Err())
	require.Eventually(t, func() bool {
		return admin.Set(ctx, "probe", "x", 0).Err() != nil // READONLY once it replicates
	}, 5*time.Second, 10*time.Millisecond)
	var buf logbuf.Buffer
	l, err := sluice.New(sluice.Options{
		Redis:        replica.Client(t),
		SyncInterval: 20 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(&buf, nil)),
	}, policy.Rule{Name: "api", Limit: 100, Window: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	require.True(t, l.Stats().Degraded)
	d, err := l.Allow(ctx, "api", "k")
	require.NoError(t, err)
	require.True(t, d.Allowed, "on the failure mode")

	require.NoError(t, admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	require.Eventually(t, func() bool { return !l.Stats().Degraded }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, l.Flush(ctx))
	out := buf.String()
	assert.Equal(t, 1, count(out, `msg="sluice: store refuses writes`), out)
	assert.Contains(t, out, "READONLY")
	assert.Equal(t, 1, count(out, "reachable again"), out)
	assert.Equal(t, int64(1), storeTotal(t, admin, policy.Rule{Name: "api", Limit: 100, Window: time.Minute}, "k"), "the admission made on the failure mode, pushed once")
}
