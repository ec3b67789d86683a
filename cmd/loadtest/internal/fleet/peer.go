package fleet

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/lat"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/traffic"
	"github.com/sluicehq/sluice/policy"
)

// The bare local limiters the load test checks beside sluice, in the same
// run, with the same kind of workers on the same schedule and keys: what a
// check costs with no fleet to keep in step.
const (
	// PeerXRate is golang.org/x/time/rate, the common Go limiter: one
	// rate.Limiter per key (a token bucket of the rule's limit per window,
	// burst the limit, behind a mutex) in an xsync.MapOf, the map sluice
	// itself uses.
	PeerXRate = "x/time/rate"
	// PeerLocal is sluice with the rule in Mode policy.Local: the same
	// limiter, its metrics on, without the store.
	PeerLocal = "sluice Local"
)

// Peers lists the peers in the order a run checks them.
var Peers = []string{PeerXRate, PeerLocal}

// PeerResult is what checking a peer measured.
type PeerResult struct {
	Peer string `json:"peer"`
	// Checks and Duration: the checks made and how long the workers ran.
	Checks   int64         `json:"checks"`
	Duration time.Duration `json:"duration"`
	// Latency of the timed checks: every check when paced, 1 in 64 flat
	// out, as for sluice.
	Latency lat.Quantiles `json:"latency"`
	// Every: 1 in Every checks was timed.
	Every int `json:"timed_every"`
}

// peerCheck decides one check of a peer.
type peerCheck func(ctx context.Context, key string, n int64) bool

// newPeer returns instance i's peer limiter and what closes it.
func newPeer(peer string, rule policy.Rule) (peerCheck, func(), error) {
	switch peer {
	case PeerXRate:
		m := xsync.NewMapOf[string, *rate.Limiter]()
		r := rate.Limit(float64(rule.Limit) / rule.Window.Seconds())
		burst := int(rule.Limit)
		mk := func() *rate.Limiter { return rate.NewLimiter(r, burst) }
		return func(_ context.Context, key string, n int64) bool {
			l, ok := m.Load(key)
			if !ok {
				l, _ = m.LoadOrCompute(key, mk)
			}
			return l.AllowN(time.Now(), int(n))
		}, func() {}, nil
	case PeerLocal:
		rule.Mode = policy.Local
		// Metrics on, as the fleet's limiters have them (one atomic add
		// per check).
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		l, err := sluice.New(sluice.Options{MeterProvider: mp}, rule)
		if err != nil {
			return nil, nil, err
		}
		name := rule.Name
		return func(ctx context.Context, key string, n int64) bool {
				d, _ := l.AllowN(ctx, name, key, n)
				return d.Allowed
			}, func() {
				_ = l.Close()
				_ = mp.Shutdown(context.Background())
			}, nil
	}
	return nil, nil, fmt.Errorf("unknown peer %q", peer)
}

// RunPeer checks a peer as Run checks the fleet: one peer limiter per
// instance, -workers goroutines each, the scenario's traffic streams (same
// seed: the same schedule and keys) for d from their start, paced or flat
// out as the profile is, the calls timed alike. Nothing is recorded but the
// count and the latencies.
func RunPeer(ctx context.Context, cfg Config, peer string, d time.Duration) (*PeerResult, error) {
	tp := cfg.Traffic
	tp.Duration = min(tp.Duration, d)
	clk := NewClock()
	defer clk.Stop()
	keys := KeyNames(tp.KeySpace())
	dist := traffic.NewKeyDist(&tp)
	checks := make([]peerCheck, tp.Instances)
	for i := range checks {
		c, closer, err := newPeer(peer, cfg.Rule)
		if err != nil {
			return nil, err
		}
		defer closer()
		checks[i] = c
	}
	t0 := time.Now().Add(20 * time.Millisecond).UnixNano()
	tp.StoreT0 = t0 // no store: the local clock stands for its clock
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			close(stop)
		case <-done:
		}
	}()
	type tally struct {
		checks int64
		lats   []uint32
	}
	tallies := make([]tally, tp.Instances*tp.Workers)
	var wg sync.WaitGroup
	for i := range tp.Instances {
		join, leave := tp.Lifetime(i)
		for w := range tp.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !clk.sleepUntil(t0+join, stop) {
					return
				}
				t := &tallies[i*tp.Workers+w]
				t.checks, t.lats = peerWorker(ctx, clk, &tp, t0, leave, tp.NewStream(i, w, dist), keys, checks[i], stop)
			}()
		}
	}
	wg.Wait()
	close(done)
	res := &PeerResult{Peer: peer, Duration: tp.Duration, Every: 1}
	var all []uint32
	for _, t := range tallies {
		res.Checks += t.checks
		all = append(all, t.lats...)
	}
	res.Latency = lat.Of(all)
	if n := len(all); n > 0 && res.Checks > int64(n) {
		res.Every = int((res.Checks + int64(n)/2) / int64(n))
	}
	return res, ctx.Err()
}

// peerWorker issues one stream's checks to a peer, as instance.worker does
// to a limiter: paced checks sleep until due and are all timed; flat out,
// 1 in 64 is.
func peerWorker(ctx context.Context, clk *Clock, tp *traffic.Params, t0, leave int64, st *traffic.Stream, keys []string, check peerCheck, stop <-chan struct{}) (int64, []uint32) {
	paced := tp.Paced()
	var n int64
	var lats []uint32
	last := clk.Precise()
	for i := 0; ; i++ {
		if i&127 == 0 {
			select {
			case <-stop:
				return n, lats
			default:
			}
		}
		now := max(clk.Now(), last) - t0
		if now >= leave {
			return n, lats
		}
		c, ok := st.Next(now)
		if !ok || c.At >= leave {
			return n, lats
		}
		if paced && c.At-now > int64(200*time.Microsecond) && !clk.sleepUntil(t0+c.At, stop) {
			return n, lats
		}
		timed := paced || i&63 == 0
		var start int64
		if timed {
			start = clk.Precise()
		}
		check(ctx, keys[c.Key], int64(c.Cost))
		last = clk.Precise()
		if timed {
			lats = append(lats, uint32(min(last-start, 1<<32-1)))
		}
		n++
	}
}
