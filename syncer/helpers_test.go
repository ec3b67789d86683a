package syncer

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/tableport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/window"
)

// opTimeout bounds every direct Redis call a test makes.
const opTimeout = 10 * time.Second

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// midSubUs returns a sub-window length in µs such that the current time (µs,
// from now) sits at phase 0.5 of bucket m: sub = ⌊2·now/(2m+1)⌋, so now/sub ≥
// m+½, and for the seconds a test lasts (far less than sub/2) the bucket is m
// and the phase just above ½. Tests can then place counts in known buckets
// and know the weight of the oldest one without racing a bucket boundary.
func midSubUs(nowUs, m int64) int64 {
	return 2 * nowUs / (2*m + 1)
}

// storeTimeUs returns the store's TIME in µs.
func storeTimeUs(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	tm, err := c.Time(ctxT(t, opTimeout)).Result()
	require.NoError(t, err)
	return tm.UnixMicro()
}

// midGeometry returns a geometry (sliding with buckets sub-windows, or fixed
// when buckets is 0) whose current sub-window is hours long and half over, so
// that no bucket boundary passes while a test runs.
func midGeometry(buckets int) window.Sliding {
	sub := midSubUs(time.Now().UnixMicro(), 100_000) * int64(time.Microsecond)
	if buckets == 0 {
		return window.NewFixed(time.Duration(sub))
	}
	return window.NewSliding(time.Duration(sub*int64(buckets)), buckets)
}

// newTable returns an Eventual table with the given cap, share = limit and
// the store up.
func newTable(t *testing.T, geo window.Sliding, limit, capv int64) *localcache.Table {
	t.Helper()
	tab, err := localcache.New(localcache.Config{Geometry: geo, Limit: limit, Eventual: true, Keys: localcache.NewKeys(1000)})
	require.NoError(t, err)
	tab.Control().SetLimits(tableport.Limits{Cap: capv, Share: limit})
	return tab
}

// testRule is a rule of a test: its table, and its windowRule once startSyncer
// (or newSyncer) has created the syncer.
type testRule struct {
	*windowRule
	Table *localcache.Table
	cfg   syncport.RuleConfig
}

// newRule returns a rule of a fresh table.
func newRule(t *testing.T, name string, geo window.Sliding, limit, capv int64) *testRule {
	t.Helper()
	tab := newTable(t, geo, limit, capv)
	return &testRule{Table: tab, cfg: syncport.RuleConfig{Name: name, Geometry: geo, Limit: limit, Keys: tab.SyncKeys()}}
}

// newSyncer creates a Syncer for rules and sets each rule's windowRule.
func newSyncer(cfg Config, rules ...*testRule) (*Syncer, error) {
	rcs := make([]syncport.RuleConfig, len(rules))
	for i, r := range rules {
		rcs[i] = r.cfg
	}
	s, err := New(cfg, rcs...)
	if err != nil {
		return nil, err
	}
	for _, r := range rules {
		r.windowRule = s.rule(r.cfg.Name)
	}
	return s, nil
}

// outcome is what a caller makes of a reservation's syncport.Answer with its rule's
// window math (as the engines do): the room the window has left, when it
// resets and, for a denial of cost n, when that cost could pass (-1: never).
// An admission needs no retry: its RetryAfter is 0, as the syncer's Result
// had it before syncport.Answer left the window math to the caller.
type outcome struct {
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
}

// outcomeOf turns a for cost n on r into an outcome.
func outcomeOf(r *testRule, a syncport.Answer, n int64) outcome {
	o := outcome{
		Remaining:  max(r.geo.Parts(a.At, a.Count).Room(r.limit.Load()), 0),
		ResetAfter: r.geo.ResetAfter(a.At),
	}
	if !a.Admitted {
		o.RetryAfter = r.geo.RetryAfter(a.At, r.limit.Load(), n, a.Count)
	}
	return o
}

// changed reports, without waiting, whether s has signalled a change of its
// Fleet since the last call (a signal stands for one change or several).
func changed(s *Syncer) bool {
	select {
	case <-s.changed:
		return true
	default:
		return false
	}
}

// fixedClock is a Clock that stands still at a time in ns.
type fixedClock int64

func (c fixedClock) Now() time.Time { return time.Unix(0, int64(c)) }

// testConfig is the Config every end-to-end test starts from: Interval of an
// hour, so that only Flush (and Reserve) syncs.
func testConfig(c redis.UniversalClient, id string) Config {
	return Config{
		Client:     c,
		Prefix:     "t",
		InstanceID: id,
		Interval:   time.Hour,
		Timeout:    time.Second,
	}
}

// startSyncer creates and starts a Syncer and closes it in t.Cleanup (which
// runs before the client's and the server's cleanups, registered earlier).
func startSyncer(t *testing.T, cfg Config, rules ...*testRule) *Syncer {
	t.Helper()
	s, err := newSyncer(cfg, rules...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = s.Close(ctx) // the store may be dead by now: only the loop must end
	})
	require.NoError(t, s.Start(ctxT(t, opTimeout)))
	return s
}

func flush(t *testing.T, s *Syncer) {
	t.Helper()
	require.NoError(t, s.Flush(ctxT(t, 30*time.Second)))
}

// admit admits n units of key on r's table, one at a time, and requires every
// one to be Allowed.
func admit(t *testing.T, s *Syncer, r *testRule, key string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		v := r.Table.AllowAt(key, s.Now(), 1)
		require.Equal(t, verdict.Allowed, v.Status, "admission %d of %q", i, key)
	}
}

// itoa writes n in decimal, as the scripts write bucket indices and
// sequence numbers.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// hash returns a Redis hash.
func hash(t *testing.T, c redis.UniversalClient, key string) map[string]string {
	t.Helper()
	h, err := c.HGetAll(ctxT(t, opTimeout), key).Result()
	require.NoError(t, err)
	return h
}

// buckets returns the bucket fields of a limiter key's hash.
func buckets(t *testing.T, c redis.UniversalClient, key string) map[int64]int64 {
	t.Helper()
	out := map[int64]int64{}
	for f, v := range hash(t, c, key) {
		if strings.HasPrefix(f, "i") || strings.HasPrefix(f, "r") {
			continue // instance bookkeeping ("i:<id>", "r<seq>:<id>")
		}
		// A bucket's count restored after a loss ("v<bucket>", rebuild.go)
		// adds to the bucket's own.
		j, err := strconv.ParseInt(strings.TrimPrefix(f, "v"), 10, 64)
		require.NoError(t, err, "bucket field %q is not a decimal integer", f)
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, "bucket %q holds %q", f, v)
		out[j] += n
	}
	return out
}

// records returns an instance's stored reservation results in a limiter
// key's hash: "<bits>:<bucket>" by sequence number.
func records(t *testing.T, c redis.UniversalClient, key, inst string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for f, v := range hash(t, c, key) {
		seq, id, ok := strings.Cut(strings.TrimPrefix(f, "r"), ":")
		if !strings.HasPrefix(f, "r") || !ok || id != inst {
			continue
		}
		if _, err := strconv.ParseInt(seq, 10, 64); err != nil {
			continue
		}
		rest, ok := strings.CutPrefix(v, seq+":")
		require.True(t, ok, "record %q=%q starts with its sequence number", f, v)
		out[seq] = rest
	}
	return out
}

// total returns the sum of a limiter key's bucket fields.
func total(t *testing.T, c redis.UniversalClient, key string) int64 {
	t.Helper()
	var sum int64
	for _, n := range buckets(t, c, key) {
		sum += n
	}
	return sum
}

// estimate returns a table's estimate and own count for key at now.
func estimate(t *testing.T, tab *localcache.Table, key string, now int64) (float64, int64) {
	t.Helper()
	est, own, ok := tab.Control().Estimate(key, now)
	require.True(t, ok, "key %q is not tracked", key)
	return est, own
}

// room returns how many units a table's admit test would let key pass at
// now.
func room(tab *localcache.Table, key string, now int64) int64 {
	n, _ := tab.Control().RoomReset(key, now)
	return n
}

// loadScript loads syncScript and bulkScript into the store's script cache.
func loadScript(t *testing.T, c redis.Scripter) {
	t.Helper()
	require.NoError(t, syncScript.Load(ctxT(t, opTimeout), c).Err())
	require.NoError(t, bulkScript.Load(ctxT(t, opTimeout), c).Err())
}

// paths are the two ways a standalone store is synced: the bulk path (the
// default there) and the per-key path (a cluster's, forced by perKey).
var paths = []struct {
	name   string
	perKey bool
}{{"bulk", false}, {"per-key", true}}

// errLost is what faultHook reports for a pipeline whose replies it dropped:
// not a redis.Error, so the syncer sees an ambiguous failure.
var errLost = errors.New("test: reply lost")

// faultHook injects failures into a real client: it can drop the replies of
// pipelines that Redis has executed (a reply lost on the way back) and fail
// SCRIPT LOAD.
type faultHook struct {
	dropReplies atomic.Bool
	failLoad    atomic.Bool
	dropped     atomic.Int64
}

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if h.failLoad.Load() && len(args) >= 2 && strings.EqualFold(cmd.Name(), "script") &&
			strings.EqualFold(args[1].(string), "load") {
			err := errors.New("test: SCRIPT LOAD failed")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.dropReplies.Load() {
			h.dropped.Add(1)
			for _, c := range cmds {
				c.SetErr(errLost)
			}
			return errLost
		}
		return err
	}
}

// instanceCount returns N̂, the number of live instances at the last
// heartbeat (at least 1).
func (s *Syncer) instanceCount() int { return int(s.instances.Load()) }
