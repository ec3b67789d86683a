package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
)

// toxi is a real TCP proxy (toxiproxy, run in process) between the limiters
// and one redis-server. Faults are toxics added to it, or the proxy itself
// stopped.
type toxi struct {
	p *toxiproxy.Proxy
}

// newToxi starts a proxy on a free loopback port in front of upstream. It is
// stopped (every connection through it closed) in t.Cleanup.
func newToxi(t *testing.T, upstream string) *toxi {
	t.Helper()
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(api, "redis", "127.0.0.1:0", upstream)
	require.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	return &toxi{p: p}
}

// Addr is where the proxy listens.
func (x *toxi) Addr() string { return x.p.Listen }

// add adds a toxic; stream is "upstream" (towards Redis: commands) or
// "downstream" (towards the client: replies).
func (x *toxi) add(t *testing.T, name, typ, stream string, attrs map[string]any) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs})
	require.NoError(t, err)
	_, err = x.p.Toxics.AddToxicJson(bytes.NewReader(b))
	require.NoError(t, err)
}

func (x *toxi) remove(t *testing.T, name string) {
	t.Helper()
	require.NoError(t, x.p.Toxics.RemoveToxic(context.Background(), name))
}

// client returns a client that goes through the proxy, closed in t.Cleanup.
// With defaults it has go-redis's default options (3s read timeout, context
// deadlines not applied to the socket, 3 retries): what most users run.
// Otherwise it has redistest's small timeouts.
func (x *toxi) client(t *testing.T, defaults bool) redis.UniversalClient {
	t.Helper()
	o := &redis.Options{
		Addr:                     x.Addr(),
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if !defaults {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, time.Second, time.Second
		o.DialerRetries = 1
		o.ContextTimeoutEnabled = true
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// faultCase is one fault between the limiters and Redis.
type faultCase struct {
	name string
	// persist gives Redis an append-only file (fsync always).
	persist bool
	// defaults gives the limiters go-redis's default client options.
	defaults bool
	// toxics are added to the proxy to inject the fault and removed to
	// heal it; faults that are not toxics use inject and heal instead.
	toxics []toxic
	inject func(t *testing.T, x *toxi, srv *redistest.Server)
	heal   func(t *testing.T, x *toxi, srv *redistest.Server)
	// degrades: the limiters must notice the store failing and switch to
	// FailLocal. Otherwise the store is slow but answers, and the error
	// budget's bound must hold.
	degrades bool
	// lost: the store loses what it held (restarted empty).
	lost bool
}

// toxic is one toxiproxy toxic: its name, type, stream and attributes.
type toxic struct {
	name, typ, stream string
	attrs             map[string]any
}

// faultCases are the faults TestFaults injects.
var faultCases = []faultCase{
	{
		name: "latency-jitter",
		toxics: []toxic{
			{"lat-up", "latency", "upstream", map[string]any{"latency": 25, "jitter": 25}},
			{"lat-down", "latency", "downstream", map[string]any{"latency": 25, "jitter": 25}},
		},
	},
	{
		// Every reply arrives after the syncer's op timeout (1s): commands
		// run, their replies come too late, the client gives up.
		name:     "latency-beyond-timeout",
		toxics:   []toxic{{"slow", "latency", "downstream", map[string]any{"latency": 1500}}},
		degrades: true,
	},
	{
		// A blackhole: nothing reaches Redis, nothing comes back, the
		// connections stay open. The limiters use go-redis's default
		// options (3s read timeout, context deadline not on the socket).
		name:     "blackhole-default-client",
		defaults: true,
		toxics:   []toxic{{"hole", "timeout", "upstream", map[string]any{"timeout": 0}}},
		degrades: true,
	},
	{
		// Redis executes every command but no reply comes back: pushes are
		// applied and the limiters do not know.
		name:     "reply-dropped",
		toxics:   []toxic{{"drop", "timeout", "downstream", map[string]any{"timeout": 0}}},
		degrades: true,
	},
	{
		// A command resets its connection before it reaches Redis.
		name:     "reset-before-command",
		toxics:   []toxic{{"rst", "reset_peer", "upstream", map[string]any{"timeout": 0}}},
		degrades: true,
	},
	{
		// Redis runs the command, then the connection is reset instead of
		// the reply arriving.
		name:     "reset-after-command",
		toxics:   []toxic{{"rst", "reset_peer", "downstream", map[string]any{"timeout": 0}}},
		degrades: true,
	},
	{
		// 16 KB/s each way: a sync cycle of this test's keys takes tens
		// of milliseconds instead of one, reservations wait longer.
		name: "bandwidth",
		toxics: []toxic{
			{"bw-up", "bandwidth", "upstream", map[string]any{"rate": 16}},
			{"bw-down", "bandwidth", "downstream", map[string]any{"rate": 16}},
		},
	},
	{
		// The network between sluice and Redis goes away: the proxy stops
		// (connections closed, new ones refused) and comes back.
		name:     "partition",
		inject:   func(t *testing.T, x *toxi, _ *redistest.Server) { x.p.Stop() },
		heal:     func(t *testing.T, x *toxi, _ *redistest.Server) { require.NoError(t, x.p.Start()) },
		degrades: true,
	},
	{
		// Redis is full: maxmemory below what it uses, noeviction. Every
		// write, the heartbeat's included, gets an OOM error reply.
		name: "redis-out-of-memory",
		inject: func(t *testing.T, _ *toxi, srv *redistest.Server) {
			c := srv.Client(t)
			ctx := context.Background()
			require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
			require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
			require.ErrorContains(t, c.Set(ctx, "probe", "x", 0).Err(), "OOM")
		},
		heal: func(t *testing.T, _ *toxi, srv *redistest.Server) {
			require.NoError(t, srv.Client(t).ConfigSet(context.Background(), "maxmemory", "0").Err())
		},
		degrades: true,
	},
	{
		name:     "redis-killed-restarted",
		persist:  true,
		inject:   func(t *testing.T, _ *toxi, srv *redistest.Server) { srv.Kill() },
		heal:     func(t *testing.T, _ *toxi, srv *redistest.Server) { srv.Restart() },
		degrades: true,
	},
	{
		name:     "redis-restarted-empty",
		inject:   func(t *testing.T, _ *toxi, srv *redistest.Server) { srv.Kill() },
		heal:     func(t *testing.T, _ *toxi, srv *redistest.Server) { srv.Restart() },
		degrades: true,
		lost:     true,
	},
}

// TestFaults injects each fault of faultCases through a real TCP proxy under
// three instances while they check one hot key (offered far above its limit)
// and 20 cold keys, then heals it, and asserts:
//
//   - every check answers within Timeout + 1s (generous: noisy machines);
//   - no check returns an error (FailLocal never does);
//   - while the store fails, each instance admits at most Limit/N̂ of the hot
//     key (FailLocal), and still admits (availability); while it is only slow,
//     the fleet admits at most Limit·(1+ErrorBudget);
//   - the syncer recovers by itself: the limiters are healthy again and Flush
//     succeeds, without a restart;
//   - Redis then holds exactly what the instances admitted, per key: counts
//     made during the fault arrive, nothing is counted twice (a store
//     restarted empty is rebuilt from the instances' views: the counts it
//     lost are back, the hot key's with the unused units of leases given
//     back after a view was pulled, at most);
//   - counts made after recovery reach Redis.
//
// The instances' views of the hot key are not compared with Redis here: an
// instance that pulled the key before another pushed (or corrected) keeps
// that older total until it next syncs the key, which the divergence cap
// makes safe (TestFleetReconverges checks convergence after a sync round).
//
// Goroutine leaks are checked for the whole package in TestMain.
func TestFaults(t *testing.T) {
	// Not parallel with the package's other tests: the load of a dozen
	// faulty fleets would disturb their timing. The cases run in parallel.
	for _, fc := range faultCases {
		t.Run(fc.name, func(t *testing.T) {
			t.Parallel()
			runFault(t, fc)
		})
	}
}

func runFault(t *testing.T, fc faultCase) {
	const (
		n       = 3
		limit   = 300
		eps     = 0.1
		timeout = 100 * time.Millisecond
		cold    = 20
	)
	var srvOpts []redistest.Option
	if fc.persist {
		srvOpts = append(srvOpts, redistest.WithPersistence())
	}
	srv := redistest.Start(t, srvOpts...)
	x := newToxi(t, srv.Addr())
	rule := policy.Rule{Name: "api", Limit: limit, Window: time.Minute}
	opts := sluice.Options{SyncInterval: 50 * time.Millisecond, Timeout: timeout, ErrorBudget: eps, MinInstances: n}
	ls := fleet(t, n, func() redis.UniversalClient { return x.client(t, fc.defaults) }, opts, rule)
	direct := srv.Client(t)
	ctx := context.Background()
	coldKey := func(i int) string { return fmt.Sprintf("cold-%d", i) }

	// Before the fault: some traffic, pushed and acknowledged. (A check
	// past the divergence cap waits for Redis at most Timeout; on a loaded
	// machine it may be denied: count what was admitted.)
	admitted := map[string]int64{} // per key (a store that loses its data is rebuilt)
	allow := func(l *sluice.Limiter, key string) {
		d, err := l.Allow(ctx, rule.Name, key)
		require.NoError(t, err)
		if d.Allowed {
			admitted[key]++
		}
	}
	for _, l := range ls {
		for range 10 {
			allow(l, "hot")
		}
		for i := range cold {
			allow(l, coldKey(i))
		}
	}
	flushAll(t, ls)
	require.Equal(t, admitted["hot"], sum(buckets(t, direct, "sluice", rule.Name, "hot", rulegeo.SubWindow(rule))))

	// The fault, under traffic.
	for _, tx := range fc.toxics {
		x.add(t, tx.name, tx.typ, tx.stream, tx.attrs)
	}
	if fc.inject != nil {
		fc.inject(t, x, srv)
	}
	injected := time.Now()
	var (
		slow     slowest
		hot      = make([]atomic.Int64, n) // hot key admissions since the fault, per instance
		coldAdm  = make([][cold]atomic.Int64, n)
		errs     atomic.Int64
		stop     = make(chan struct{})
		firstErr atomic.Value
	)
	wait := perLimiter(ls, stop, func(i int, l *sluice.Limiter, it int) bool {
		key, ci := "hot", -1
		if it%10 == 0 {
			ci = (it / 10) % cold
			key = coldKey(ci)
		}
		var d sluice.Decision
		var err error
		slow.time(func() { d, err = l.Allow(ctx, rule.Name, key) })
		switch {
		case err != nil:
			errs.Add(1)
			firstErr.CompareAndSwap(nil, err)
		case d.Allowed && ci < 0:
			hot[i].Add(1)
		case d.Allowed:
			coldAdm[i][ci].Add(1)
		}
		time.Sleep(time.Millisecond)
		return true
	})
	if fc.degrades {
		waitFor(t, 15*time.Second, "every limiter to notice the fault", degraded(ls, true))
		time.Sleep(500 * time.Millisecond) // traffic while degraded
	} else {
		time.Sleep(1500 * time.Millisecond)
	}
	close(stop)
	wait()
	faultFor := time.Since(injected)

	assert.Zero(t, errs.Load(), "checks returned errors under FailLocal: %v", firstErr.Load())
	assert.Less(t, time.Duration(slow.ns.Load()), timeout+time.Second, "a check took too long")
	var hotDuring int64
	for i := range hot {
		h := hot[i].Load()
		hotDuring += h
		admitted["hot"] += h
		for ci := range cold {
			admitted[coldKey(ci)] += coldAdm[i][ci].Load()
		}
		if fc.degrades {
			share := int64(limit / n)
			assert.LessOrEqual(t, h, share, "instance %d: FailLocal admits at most Limit/N̂ of its own", i)
		}
	}
	if fc.degrades {
		assert.Positive(t, hotDuring, "FailLocal keeps admitting while the store fails")
	} else {
		for i, l := range ls {
			assert.False(t, l.Stats().Degraded, "instance %d: a slow store is not a failed one", i)
		}
		assert.LessOrEqual(t, admitted["hot"], int64(limit*(1+eps)), "the error budget holds on a slow store")
	}

	// Heal: the syncer recovers by itself.
	for _, tx := range fc.toxics {
		x.remove(t, tx.name)
	}
	if fc.heal != nil {
		fc.heal(t, x, srv)
	}
	waitFor(t, 15*time.Second, "every limiter to see the store again", degraded(ls, false))
	flushAll(t, ls)
	flushAll(t, ls)
	for i, l := range ls {
		assert.True(t, l.Stats().Sync.Healthy, "instance %d healthy", i)
		if fc.lost {
			assert.Equal(t, int64(1), l.Stats().Sync.Rebuilds, "instance %d saw the loss once", i)
		}
	}

	// Redis holds exactly what was admitted, per key.
	got := func(key string) int64 {
		return sum(buckets(t, direct, "sluice", rule.Name, key, rulegeo.SubWindow(rule)))
	}
	if fc.lost {
		// Rebuilt from the views, the largest per bucket: a view pulled
		// before an instance gave back the unused units of a lease still
		// counts them, so the store may count more than was admitted
		// (false denials in that window, never more admissions).
		assert.GreaterOrEqual(t, got("hot"), admitted["hot"], "hot key: Redis counts every admission, the lost ones restored")
	} else {
		assert.Equal(t, admitted["hot"], got("hot"), "hot key: Redis counts every admission exactly once")
	}
	for ci := range cold {
		assert.Equal(t, admitted[coldKey(ci)], got(coldKey(ci)), "cold key %d", ci)
	}
	// Counts made after recovery reach Redis.
	for _, l := range ls {
		d, err := l.Allow(ctx, rule.Name, "after")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	flushAll(t, ls)
	assert.Equal(t, int64(n), got("after"))

	st := ls[0].Stats().Sync
	t.Logf("%s: fault %v: hot admitted %d during (per instance %v), total %d, Redis holds %d; slowest check %v; instance 0: failures %d, retried %d, corrections %d",
		fc.name, faultFor.Round(time.Millisecond), hotDuring, loads(hot), admitted["hot"], got("hot"), time.Duration(slow.ns.Load()).Round(time.Microsecond),
		st.Failures, st.Retried, st.Corrections)
}

func loads(xs []atomic.Int64) []int64 {
	out := make([]int64, len(xs))
	for i := range xs {
		out[i] = xs[i].Load()
	}
	return out
}

// TestInstancePartitioned cuts one instance of three off from Redis (its
// proxy stops: to the others it is as good as dead) and brings it back:
// the others drop it from N̂ once its registry entry expires (InstanceTTL,
// 3s by default) and raise their caps; it keeps deciding on FailLocal with
// the N̂ it last saw; when it returns it re-registers, N̂ is 3 again
// everywhere, and the counts it admitted while cut off arrive exactly once.
func TestInstancePartitioned(t *testing.T) {
	// Not parallel: its load would disturb the timing of the package's
	// other tests, which run after it.
	srv := redistest.Start(t)
	x := newToxi(t, srv.Addr())
	rule := policy.Rule{Name: "api", Limit: 3000, Window: time.Minute}
	opts := sluice.Options{SyncInterval: 50 * time.Millisecond, ErrorBudget: 0.1}
	clients := []func() redis.UniversalClient{
		func() redis.UniversalClient { return srv.Client(t) },
		func() redis.UniversalClient { return srv.Client(t) },
		func() redis.UniversalClient { return x.client(t, false) },
	}
	var ls []*sluice.Limiter
	for _, c := range clients {
		ls = append(ls, fleet(t, 1, c, opts, rule)...)
	}
	flushAll(t, ls)
	instances := func(want int64, which ...*sluice.Limiter) func() bool {
		return func() bool {
			for _, l := range which {
				if l.Stats().Instances != want {
					return false
				}
			}
			return true
		}
	}
	require.True(t, instances(3, ls...)())
	ctx := context.Background()
	admit := func(l *sluice.Limiter, key string, n int) int64 {
		var ok int64
		for range n {
			d, err := l.Allow(ctx, rule.Name, key)
			require.NoError(t, err)
			if d.Allowed {
				ok++
			}
		}
		return ok
	}

	x.p.Stop()
	cut := time.Now()
	waitFor(t, 10*time.Second, "the others to drop the lost instance from N̂", instances(2, ls[0], ls[1]))
	dropped := time.Since(cut)
	assert.Less(t, dropped, 3*time.Second+2*time.Second, "N̂ falls once the registry entry expires")
	waitFor(t, 5*time.Second, "the lost instance to notice", degraded(ls[2:], true))
	assert.Equal(t, int64(3), ls[2].Stats().Instances, "a cut-off instance keeps the N̂ it last saw")
	var want int64
	want += admit(ls[0], "k", 100)
	cutOff := admit(ls[2], "k", 2000)
	want += cutOff
	assert.Equal(t, rule.Limit/3, cutOff, "FailLocal: Limit/N̂ with the last N̂")

	require.NoError(t, x.p.Start())
	waitFor(t, 10*time.Second, "the instance to come back", degraded(ls[2:], false))
	waitFor(t, 5*time.Second, "N̂ to be 3 everywhere", instances(3, ls...))
	flushAll(t, ls)
	flushAll(t, ls)
	assert.Equal(t, want, sum(buckets(t, srv.Client(t), "sluice", rule.Name, "k", rulegeo.SubWindow(rule))), "the cut-off counts arrive once")
	t.Logf("N̂ dropped %v after the cut; cut-off instance admitted %d", dropped.Round(time.Millisecond), cutOff)
}
