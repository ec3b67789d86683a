package syncer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/window"
)

// TestLeaseAhead: a key holding a lease of the current bucket that admits on
// it is leased the next bucket before the current one ends, with no sync
// cycle (the interval is an hour) and no check waiting: the store counts
// the grant in the next bucket, and once that bucket starts the key admits
// the grant on top of its cap. A key that holds no lease is not synced.
func TestLeaseAhead(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	geo := window.NewSliding(8*time.Second, 4) // 2 s buckets: the pass runs 250 ms before each ends
	r := newRule(t, "api", geo, 1000, 10)
	r.cfg.Leases = true
	s := startSyncer(t, testConfig(c, "A"), r)

	// Start early in a bucket, so that the test runs within it and the next.
	for geo.Phase(s.Now()) > 0.25 {
		time.Sleep(10 * time.Millisecond)
	}
	k := geo.Index(s.Now())
	admit(t, s, r, "quiet", 1)
	busy(t, s, r, "k")
	admit(t, s, r, "k", 5) // the fifth asks for an early sync, which brings a lease
	require.Eventually(t, func() bool { return s.Stats().EarlySyncs == 1 }, 5*time.Second, time.Millisecond)
	ref, ok := r.Table.Ref("k")
	require.True(t, ok)
	require.Eventually(t, func() bool {
		_, own := estimate(t, r.Table, "k", s.Now())
		return own == 0 && r.Table.Room("k", s.Now()) > 900
	}, 5*time.Second, time.Millisecond, "the sync settled, with a lease")
	admit(t, s, r, "k", 20) // on the lease
	want := r.Table.NextWant(ref, s.Now(), 0)
	require.Positive(t, want)

	name := r.KeyName("k")
	var ahead int64
	for geo.Index(s.Now()) == k && ahead == 0 {
		ahead = buckets(t, c, name)[k+1]
		time.Sleep(time.Millisecond)
	}
	require.Positive(t, ahead, "the next bucket's lease is in the store before the bucket starts")
	assert.Equal(t, int64(2), s.Stats().EarlySyncs, "one early sync, one sync ahead")
	assert.Zero(t, s.Stats().UrgentCycles, "no check waited")
	_, ok = buckets(t, c, r.KeyName("quiet"))[k+1]
	assert.False(t, ok, "a key without a lease is not leased ahead")

	for geo.Index(s.Now()) == k {
		time.Sleep(time.Millisecond)
	}
	now := s.Now()
	r.Table.Tick(now)
	n := int64(0)
	for r.Table.AllowAt("k", now, 1).Status == localcache.Allowed && n < 5000 {
		n++
	}
	assert.GreaterOrEqual(t, n, ahead+10, "the new bucket starts with the lease granted ahead, and the cap")
	flush(t, s)
	_, own := estimate(t, r.Table, "k", s.Now())
	assert.Zero(t, own)
}

// TestCloseLeasesNothingAfterItsFlush: Close's flush gives back every lease
// and the loop stops right after it. A lease-ahead pass that falls due while
// the flush waits for the store (paused here across the pass's due time)
// must not run once the flush is done: the units it would lease, counted in
// the store at once, would never be given back, and the store would count
// more than was admitted. Three closes, each in its own bucket.
func TestCloseLeasesNothingAfterItsFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t)
	t.Cleanup(srv.Resume)                      // before the kill of the server's own cleanup
	geo := window.NewSliding(4*time.Second, 4) // 1 s buckets: the pass runs 125 ms before each ends
	for i := range 3 {
		r := newRule(t, "api"+itoa(int64(i)), geo, 1000, 10)
		r.cfg.Leases = true
		s := startSyncer(t, testConfig(c, "A"+itoa(int64(i))), r)
		for geo.Phase(s.Now()) > 0.25 {
			time.Sleep(10 * time.Millisecond)
		}
		k := geo.Index(s.Now())
		busy(t, s, r, "k")
		admit(t, s, r, "k", 5) // the fifth asks for an early sync, which brings a lease
		require.Eventually(t, func() bool {
			_, own := estimate(t, r.Table, "k", s.Now())
			return s.Stats().EarlySyncs == 1 && own == 0 && r.Table.Room("k", s.Now()) > 900
		}, 5*time.Second, time.Millisecond, "close %d: the early sync settled, with a lease", i)
		// On the lease, more than twice the cap: the key is leased ahead at
		// the pass (Keys.NextWant).
		admit(t, s, r, "k", 40)

		due := (k+1)*geo.Sub() - geo.Sub()/8
		time.Sleep(time.Duration(due-s.Now()) - 30*time.Millisecond)
		srv.Pause()
		closed := make(chan error, 1)
		go func() { closed <- s.Close(ctxT(t, 10*time.Second)) }()
		time.Sleep(time.Duration(due-s.Now()) + 30*time.Millisecond)
		srv.Resume()
		require.NoError(t, <-closed)
		assert.Zero(t, buckets(t, c, r.KeyName("k"))[k+1], "close %d: nothing leased ahead after Close's flush", i)
		assert.Equal(t, int64(45), total(t, c, r.KeyName("k")), "close %d: the store counts what was admitted", i)
	}
}

// TestLeaseWantsItsPeak: a sync that asks for a lease of the current bucket
// (an early sync, a check at the cap) asks for at least the most leased
// units the key used in one bucket of the window, so that a key hit in
// bursts gets a burst's worth at once instead of a doubling series of round
// trips; a peak that has left the window no longer counts.
func TestLeaseWantsItsPeak(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	geo := midGeometry(4) // hours-long sub-windows: the test stays in one bucket
	r := newRule(t, "api", geo, 1000, 2)
	r.cfg.Leases = true
	s, err := newSyncer(testConfig(c, "A"), r)
	require.NoError(t, err)
	now := s.Now()
	k, span := geo.Index(now), int64(geo.Span())
	require.Equal(t, localcache.Allowed, r.Table.AllowAt("k", now, 1).Status)
	ref, ok := r.Table.Ref("k")
	require.True(t, ok)
	id := keyID{rule: r.Rule, key: "k"}
	base := r.Table.Want(ref, now)
	require.Less(t, base, int64(40))

	wantArg := func() any {
		cl := call{it: item{id: id, ref: ref, lease: true}, batches: []*batch{{seq: 1}}}
		return s.args(nil, &cl)[12]
	}
	tests := []struct {
		name   string
		peakAt int64
		want   int64
	}{
		{"no peak", 0, base},
		{"a peak in the window", k - span + 1, 40},
		{"a peak out of the window", k - span, base},
	}
	for _, tt := range tests {
		delete(s.uses, id)
		if tt.peakAt != 0 {
			s.uses[id] = use{ref: ref, peak: 40, peakAt: tt.peakAt, last: tt.peakAt}
		}
		assert.Equal(t, tt.want, wantArg(), tt.name)
	}
}
