package syncer

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tableport"
)

// TestCloseBoundedOnHungStore closes a syncer whose store hangs (SIGSTOP:
// connections are accepted, nothing is answered), through a client with
// go-redis's default options: a 5s read timeout that context deadlines do not
// shorten (ContextTimeoutEnabled is off), and 3 retries. The final flush's
// heartbeat hangs; Close must return once its context has ended and the read
// in flight has timed out, not wait for the client's retries (before the
// fix: about 20s for a 1s context).
func TestCloseBoundedOnHungStore(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opt := &redis.Options{
		Addr:                     srv.Addr(),
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	// Close waits at most for the read in flight, which nothing can
	// interrupt: the client's read timeout (go-redis's default; -short
	// sets one of 1 s), or the context's second.
	readTimeout := 5 * time.Second
	if testing.Short() {
		readTimeout = time.Second
		opt.ReadTimeout = readTimeout
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	cfg := testConfig(c, "A") // an hour between cycles: the op timeout is 2h
	r := newRule(t, "api", midGeometry(6), 1000, tableport.NoCap)
	s, err := newSyncer(cfg, r)
	require.NoError(t, err)
	require.NoError(t, s.Start(ctxT(t, opTimeout)))
	admit(t, s, r, "k", 3)

	srv.Pause()
	t.Cleanup(srv.Resume)              // before the kill of the server's own cleanup
	time.Sleep(200 * time.Millisecond) // a cycle is now waiting on the store
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err = s.Close(ctx)
	took := time.Since(start)
	assert.Error(t, err)
	// At most one read timeout for the read in flight, or the context's
	// second; generous slack.
	assert.Less(t, took, readTimeout+3*time.Second, "Close waited for more than the read in flight")
	t.Logf("Close took %v: %v", took.Round(time.Millisecond), err)
}

// refundHook runs a function once, before the first pipeline that names a
// given Redis key is sent.
type refundHook struct {
	key  string
	once atomic.Pointer[func()]
}

func (h *refundHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *refundHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *refundHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if f := h.once.Load(); f != nil && slices.ContainsFunc(cmds, func(c redis.Cmder) bool {
			return slices.Contains(c.Args(), any(h.key))
		}) && h.once.CompareAndSwap(f, nil) {
			(*f)()
		}
		return next(ctx, cmds)
	}
}

// TestFlushPushesWhatItsCycleQueued: a flush syncs until nothing is left for
// the store. A check refunded while its count is on its way to the store
// (here: after the flush built its push, before the store ran it) leaves the
// push's acknowledgement larger than what is pending: Settle turns the
// difference into a correction, queued during the flush's cycle, which only
// a second cycle pushes. Flush and Close run it: the store then counts what
// was admitted and not refunded (it counted the refunded unit before).
func TestFlushPushesWhatItsCycleQueued(t *testing.T) {
	t.Parallel()
	for _, closing := range []bool{false, true} {
		t.Run(map[bool]string{false: "Flush", true: "Close"}[closing], func(t *testing.T) {
			t.Parallel()
			c := redistest.Start(t).Client(t)
			r := newRule(t, "api", midGeometry(6), 1000, tableport.NoCap)
			s, err := newSyncer(testConfig(c, "A"), r)
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close(ctxT(t, 20*time.Second)) })
			hook := &refundHook{key: r.keyName("k")}
			c.AddHook(hook)
			require.NoError(t, s.Start(ctxT(t, opTimeout)))
			admit(t, s, r, "k", 3)
			refund := func() {
				n, ok := r.Table.Refund("k", s.Now(), 1)
				assert.True(t, ok)
				assert.Equal(t, int64(1), n)
			}
			hook.once.Store(&refund)
			if closing {
				require.NoError(t, s.Close(ctxT(t, 30*time.Second)))
			} else {
				flush(t, s)
			}
			require.Nil(t, hook.once.Load(), "the refund ran during the push")
			assert.Equal(t, int64(2), total(t, c, r.keyName("k")))
		})
	}
}
