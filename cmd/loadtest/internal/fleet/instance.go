package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/record"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/traffic"
)

// Counters are the syncer counters an instance accumulated during the run
// (differences of sluice.Limiter.Stats().Sync between start and end).
type Counters struct {
	Cycles       int64 `json:"cycles"`
	UrgentCycles int64 `json:"urgent_cycles"`
	EarlySyncs   int64 `json:"early_syncs"`
	KeySyncs     int64 `json:"key_syncs"`
	Reservations int64 `json:"reservations"`
	RoundTrips   int64 `json:"round_trips"`
	Commands     int64 `json:"commands"`
	Failures     int64 `json:"failures"`
	Corrections  int64 `json:"corrections"`
	Retried      int64 `json:"retried"`
	// Waits: the checks that waited for want of local allowance, by why.
	Waits sluice.SyncWaits `json:"waits"`
}

func countersOf(s sluice.SyncStats) Counters {
	return Counters{s.Cycles, s.UrgentCycles, s.EarlySyncs, s.KeySyncs, s.Reservations, s.RoundTrips, s.Commands, s.Failures, s.Corrections, s.Retried, s.Waits}
}

func (c Counters) sub(o Counters) Counters {
	return Counters{c.Cycles - o.Cycles, c.UrgentCycles - o.UrgentCycles, c.EarlySyncs - o.EarlySyncs, c.KeySyncs - o.KeySyncs,
		c.Reservations - o.Reservations, c.RoundTrips - o.RoundTrips, c.Commands - o.Commands,
		c.Failures - o.Failures, c.Corrections - o.Corrections, c.Retried - o.Retried, addWaits(c.Waits, o.Waits, -1)}
}

// addWaits returns a + sign·b.
func addWaits(a, b sluice.SyncWaits, sign int64) sluice.SyncWaits {
	return sluice.SyncWaits{Near: a.Near + sign*b.Near, New: a.New + sign*b.New, Start: a.Start + sign*b.Start,
		Lease: a.Lease + sign*b.Lease, Cap: a.Cap + sign*b.Cap}
}

// Add returns c + o.
func (c Counters) Add(o Counters) Counters {
	return Counters{c.Cycles + o.Cycles, c.UrgentCycles + o.UrgentCycles, c.EarlySyncs + o.EarlySyncs, c.KeySyncs + o.KeySyncs,
		c.Reservations + o.Reservations, c.RoundTrips + o.RoundTrips, c.Commands + o.Commands,
		c.Failures + o.Failures, c.Corrections + o.Corrections, c.Retried + o.Retried, addWaits(c.Waits, o.Waits, 1)}
}

// InstanceResult is what one instance reports.
type InstanceResult struct {
	Index    int           `json:"index"`
	Checks   int64         `json:"checks"`
	Admitted int64         `json:"admitted"`
	Errors   int64         `json:"errors"`
	ErrorMsg string        `json:"error_msg,omitempty"`
	Active   time.Duration `json:"active"` // time serving traffic
	// Truncated is set when the record budget ran out, TruncatedAt is
	// when (the offset from the run's start of the first record refused).
	Truncated   bool          `json:"truncated,omitempty"`
	TruncatedAt time.Duration `json:"truncated_at,omitempty"`
	Sync        Counters      `json:"sync"`
	// Paths counts the checks by how the limiter decided them.
	Paths Paths `json:"paths"`
	// Cycle holds LastCycle samples (one per observed full cycle).
	Cycle Hist `json:"cycle"`
	// CycleKeys is the largest LastCycleKeys seen.
	CycleKeys int64 `json:"cycle_keys"`
	// NHatMin, NHatMax: the range of N̂ seen while serving.
	NHatMin  int64 `json:"nhat_min"`
	NHatMax  int64 `json:"nhat_max"`
	Degraded bool  `json:"degraded,omitempty"`
	// Latency of Allow: every check of a paced profile, 1 in 64 flat out.
	Latency Hist `json:"latency"`
	// MaxLag is how late the worst check went out against its schedule.
	MaxLag time.Duration `json:"max_lag"`
	// MaxSkew is the largest gap between the recovered decision time and our
	// own reading of the store clock after the check.
	MaxSkew time.Duration `json:"max_skew"`
	// OffsetMin, OffsetMax: the range of the limiter's store-clock offset
	// (Stats().Sync.Offset) while serving. Instances on one machine share
	// the wall clock, so differences between instances are measurement
	// error: the instances' disagreement about the store's time.
	OffsetMin time.Duration `json:"offset_min"`
	OffsetMax time.Duration `json:"offset_max"`
	// Ambiguous counts the checks whose decision time could be told only
	// modulo a period (record.Record.Early > 0), AmbiguousAdmitted the
	// admitted ones among them.
	Ambiguous         int64 `json:"ambiguous,omitempty"`
	AmbiguousAdmitted int64 `json:"ambiguous_admitted,omitempty"`
	// Flushes and FlushMax: sync-burst flushes and the slowest.
	Flushes  int           `json:"flushes,omitempty"`
	FlushMax time.Duration `json:"flush_max,omitempty"`
	// Keys is the number of keys tracked locally at the end.
	Keys int64 `json:"keys"`
	// Replaced counts the times the instance's limiter was closed and a
	// new one, with a new InstanceID, opened in its place (a deploy).
	Replaced int `json:"replaced,omitempty"`
	// Err is set if the instance could not run.
	Err string `json:"err,omitempty"`
}

// skewClock is an instance clock off by d.
type skewClock struct{ d time.Duration }

func (c skewClock) Now() time.Time { return time.Now().Add(c.d) }

// instance is one sluice.Limiter with its own client, workers and samplers.
type instance struct {
	idx    int
	cfg    *Config
	clk    *Clock
	keys   []string
	dist   *traffic.KeyDist
	lim    *sluice.Limiter
	cli    redis.UniversalClient
	skew   int64
	offset atomic.Int64
	start  Counters
	res    InstanceResult
	// reader reads the limiter's metrics (Paths); meter is the provider
	// the instance made for it, if it did (shut down at close).
	reader     *sdkmetric.ManualReader
	meter      *sdkmetric.MeterProvider
	startPaths Paths
	// admissions collects the admissions in the LOADTEST_ADMISSIONS
	// diagnosis mode (nil otherwise).
	admissions *admissionLog
	// gen counts the limiters closed (a deploy replaces the instance's);
	// collected is set once a limiter's counts are in res.
	gen       int
	collected bool
	// sampled is set once sample has begun its ranges.
	sampled bool
}

func newInstance(cfg *Config, idx int, clk *Clock, keys []string, dist *traffic.KeyDist) *instance {
	return &instance{idx: idx, cfg: cfg, clk: clk, keys: keys, dist: dist, skew: int64(idx) * int64(cfg.Skew),
		res: InstanceResult{Index: idx}}
}

// open creates the limiter (registering the instance).
func (in *instance) open() error {
	cfg := in.cfg
	in.cli = cfg.Target.Client()
	opts := sluice.Options{
		Redis:        in.cli,
		Prefix:       cfg.Prefix,
		SyncInterval: cfg.SyncInterval,
		ErrorBudget:  cfg.ErrorBudget,
		Timeout:      cfg.Timeout,
		MinInstances: cfg.MinInstances,
		InstanceID:   in.id(),
		// The limiter's own log lines (the store's state, N̂ changing)
		// would land between the progress lines on the terminal; the
		// report reads the same facts from Stats and the metrics.
		Logger: slog.New(slog.DiscardHandler),
	}
	if cfg.Skew != 0 {
		opts.Clock = skewClock{time.Duration(in.skew)}
	}
	if cfg.Meter != nil {
		mp, rd, err := cfg.Meter(in.idx)
		if err != nil {
			_ = in.cli.Close()
			return err
		}
		opts.MeterProvider, in.reader = mp, rd
	} else {
		// The limiter counts its checks by path only for a real
		// MeterProvider: one atomic add per check, on a stripe of its
		// own, as in any deployment that exports sluice's metrics.
		in.reader = sdkmetric.NewManualReader()
		in.meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(in.reader))
		opts.MeterProvider = in.meter
	}
	l, err := sluice.New(opts, cfg.Rule)
	if err != nil {
		_ = in.cli.Close()
		return err
	}
	if cfg.RulesFile != "" {
		// The rules file holds cfg.Rule among others; the limiter
		// follows it until it is closed.
		err := l.WatchFile(context.Background(), cfg.RulesFile, sluice.WatchOptions{Interval: WatchInterval})
		if err != nil {
			_ = l.Close()
			_ = in.cli.Close()
			return fmt.Errorf("watching the rules file: %w", err)
		}
	}
	in.lim = l
	st := l.Stats()
	in.offset.Store(int64(st.Sync.Offset))
	in.start = countersOf(st.Sync)
	in.startPaths = ReadPaths(in.reader)
	return nil
}

// WatchInterval is how often an instance polls the rules file it watches
// (the reload profile).
const WatchInterval = 100 * time.Millisecond

// id returns the instance's InstanceID: its index, and for a replacement
// (a deploy) its generation.
func (in *instance) id() string {
	id := in.cfg.RunID + "-i" + strconv.Itoa(in.idx)
	if in.gen > 0 {
		id += "-r" + strconv.Itoa(in.gen)
	}
	return id
}

// close closes the limiter (Close pushes its last counts) and its client;
// a later open starts a new limiter, with a new InstanceID.
func (in *instance) close() {
	if in.lim != nil {
		if err := in.lim.Close(); err != nil && in.res.ErrorMsg == "" {
			in.res.ErrorMsg = "close: " + err.Error()
		}
		in.lim = nil
		in.gen++
	}
	if in.cli != nil {
		_ = in.cli.Close()
		in.cli = nil
	}
	if in.meter != nil {
		_ = in.meter.Shutdown(context.Background())
		in.meter = nil
	}
}

// collect adds the limiter's syncer counters and checks by path since it
// opened to the instance's result.
func (in *instance) collect() {
	st := in.lim.Stats()
	in.res.Sync = in.res.Sync.Add(countersOf(st.Sync).sub(in.start))
	p := ReadPaths(in.reader).sub(in.startPaths)
	if in.collected {
		p = in.res.Paths.Add(p)
	}
	in.res.Paths = p
	in.res.Keys = st.Keys
	in.collected = true
}

// workerState is one worker's tallies.
type workerState struct {
	checks, admitted, errors int64
	ambiguous                int64
	ambiguousAdmitted        int64
	errMsg                   string
	lat                      Hist
	maxLag, maxSkew          int64
	truncated                bool
	truncatedAt              int64 // offset at which the budget refused a record
}

// run serves the instance's traffic in each of its spans of service (from
// its join to its leave; a deploy closes its limiter between two spans and
// opens a new one), or until stop closes, recording into buffers made by
// newBuf.
func (in *instance) run(stop <-chan struct{}, budget *record.Budget, newBuf func(expect int) *record.Buffer) []*record.Buffer {
	cfg := in.cfg
	tp := &cfg.Traffic
	spans := tp.Serving(in.idx)
	var bufs []*record.Buffer
	var states []workerState
	var streams []*traffic.Stream
	for si, span := range spans {
		if in.lim == nil {
			// As behind a readiness probe, the instance starts before
			// traffic reaches it: New returns once the fleet counts it
			// (at most 3·SyncInterval + Timeout), a replacement once its
			// predecessor has closed.
			from := span.From - min(3*int64(cfg.SyncInterval), int64(time.Second)) - int64(cfg.Timeout)
			if si > 0 {
				from = max(from, spans[si-1].To)
			}
			if !in.clk.sleepUntil(cfg.T0+from, stop) {
				break
			}
			if err := in.open(); err != nil {
				in.res.Err = err.Error()
				break
			}
		}
		if !in.clk.sleepUntil(cfg.T0+span.From, stop) {
			break
		}
		if bufs == nil {
			join, leave := tp.Lifetime(in.idx)
			expect := 1024
			if tp.Rate > 0 {
				expect = int(tp.Rate*float64(leave-join)/1e9/float64(tp.Instances*tp.Workers)*1.2) + 1024
			}
			bufs = make([]*record.Buffer, tp.Workers)
			states = make([]workerState, tp.Workers)
			streams = make([]*traffic.Stream, tp.Workers)
			for w := range tp.Workers {
				bufs[w] = newBuf(expect)
				streams[w] = tp.NewStream(in.idx, w, in.dist)
			}
		}
		refused := in.serve(stop, span.To, streams, bufs, states)
		in.collect()
		if refused {
			break // a worker's record was refused: the run ends
		}
		if si < len(spans)-1 {
			in.close() // replaced: Close pushes the last counts
			in.res.Replaced++
		}
	}
	for i := range states {
		s := &states[i]
		in.res.Checks += s.checks
		in.res.Admitted += s.admitted
		in.res.Errors += s.errors
		in.res.Ambiguous += s.ambiguous
		in.res.AmbiguousAdmitted += s.ambiguousAdmitted
		if in.res.ErrorMsg == "" {
			in.res.ErrorMsg = s.errMsg
		}
		in.res.Latency.Merge(&s.lat)
		in.res.MaxLag = max(in.res.MaxLag, time.Duration(s.maxLag))
		in.res.MaxSkew = max(in.res.MaxSkew, time.Duration(s.maxSkew))
		if s.truncated && (!in.res.Truncated || time.Duration(s.truncatedAt) < in.res.TruncatedAt) {
			in.res.TruncatedAt = time.Duration(s.truncatedAt)
		}
		in.res.Truncated = in.res.Truncated || s.truncated
	}
	_ = budget
	return bufs
}

// serve runs the workers on the open limiter until leave (an offset) or
// until stop closes, and reports whether a record was refused.
func (in *instance) serve(stop <-chan struct{}, leave int64, streams []*traffic.Stream, bufs []*record.Buffer, states []workerState) bool {
	tp := &in.cfg.Traffic
	began := in.clk.Precise()
	end := make(chan struct{})
	var samplers sync.WaitGroup
	samplers.Add(1)
	go func() {
		defer samplers.Done()
		in.sample(end)
	}()
	if tp.Profile == traffic.SyncBurst {
		samplers.Add(1)
		go func() {
			defer samplers.Done()
			in.flusher(end, leave)
		}()
	}
	var wg sync.WaitGroup
	for w := range tp.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in.worker(streams[w], bufs[w], stop, leave, &states[w])
		}()
	}
	wg.Wait()
	in.res.Active += time.Duration(in.clk.Precise() - began)
	close(end)
	samplers.Wait()
	for i := range states {
		if states[i].truncated {
			return true
		}
	}
	return false
}

// worker issues the checks of one stream.
func (in *instance) worker(st *traffic.Stream, buf *record.Buffer, stop <-chan struct{}, leave int64, ws *workerState) {
	cfg := in.cfg
	t0 := cfg.T0
	paced := cfg.Traffic.Paced()
	rule := cfg.Rule.Name
	geo := cfg.Geometry()
	period := geo.Sub() // a fixed window's is the window
	if !cfg.Windowed() {
		// A bucket's or log's ResetAfter is not tied to a period: the
		// decision time is the store time at the middle of the call.
		period = 0
	}
	margin := recoveryMargin(period)
	ctx := context.Background()
	inst := uint16(in.idx)
	last := in.clk.Precise()
	for i := 0; ; i++ {
		if i&127 == 0 {
			select {
			case <-stop:
				return
			default:
			}
		}
		// The coarse clock, or the precise reading after the previous
		// call if later (the coarse clock's goroutine waits for a CPU
		// like any other).
		now := max(in.clk.Now(), last) - t0
		if now >= leave {
			return
		}
		c, ok := st.Next(now)
		if !ok {
			return
		}
		if c.At >= leave {
			st.Unread(c) // the next span of service makes it
			return
		}
		if paced {
			if d := c.At - now; d > int64(200*time.Microsecond) {
				if !in.clk.sleepUntil(t0+c.At, stop) {
					return
				}
			} else if -d > ws.maxLag {
				ws.maxLag = -d
			}
		}
		// start is a time no later than the call's start: the clock read
		// after the previous call (flat out, a clock read more per check
		// would cost a fifth of the throughput), or a fresh reading when
		// the call is timed (every check when paced, 1 in 64 flat out) or
		// for a bucket's midpoint.
		timed := paced || i&63 == 0 || debugTimes
		var trips int64
		if timed {
			trips = in.trips()
		}
		start := last
		if timed || period == 0 {
			start = in.clk.Precise()
		}
		d, err := in.lim.AllowN(ctx, rule, in.keys[c.Key], int64(c.Cost))
		done := in.clk.Precise()
		var flags uint8
		var lat uint32
		if timed {
			el := done - start
			ws.lat.Add(el)
			flags |= record.Timed
			lat = record.SaturateLat(el)
			if in.trips() != trips {
				flags |= record.RoundTrip
			}
			if debugTimes && el > 30_000 {
				flags |= record.Slow
			}
		}
		if err != nil {
			ws.errors++
			if ws.errMsg == "" {
				ws.errMsg = err.Error()
			}
			if !errors.Is(err, sluice.ErrStoreUnavailable) {
				continue // not a decision
			}
			flags |= record.Failed
		}
		ws.checks++
		if d.Allowed {
			ws.admitted += int64(c.Cost)
			flags |= record.Allowed
		}
		last = done
		shift := in.skew + in.offset.Load()
		after := done + shift
		if period == 0 {
			// Decided in the store during the call: the midpoint errs by
			// at most half the call.
			after -= (done - start) / 2
		}
		t := recoverTime(after, d.ResetAfter, period, margin)
		var early uint8
		if period > 0 {
			if early = earlier(t, start+shift, period, margin); early > 0 {
				// The decision time cannot be told for sure.
				ws.ambiguous++
				if d.Allowed {
					ws.ambiguousAdmitted++
				}
			}
		}
		if sk := abs(after - t); sk > ws.maxSkew {
			ws.maxSkew = sk
		}
		if in.admissions != nil && d.Allowed {
			in.admissions.add(admission{key: c.Key, cost: c.Cost, inst: inst, early: early, start: start + shift, end: after, t: t,
				reset: int64(d.ResetAfter), remaining: d.Remaining})
		}
		if !buf.Add(record.Record{T: t, Key: c.Key, Cost: c.Cost, Inst: inst, Flags: flags, Early: early, Lat: lat}) {
			ws.truncated = true
			ws.truncatedAt = done - t0
			return
		}
	}
}

// trips returns a count that moves whenever the instance begins a round
// trip of checks handed to Redis or has one decided there: a check that
// waited for Redis sees it move during its call (record.RoundTrip).
func (in *instance) trips() int64 {
	st := in.lim.Stats().Sync
	return st.UrgentCycles + st.Reservations
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// sample refreshes the store-clock offset every few ms and samples the sync
// statistics until end closes.
func (in *instance) sample(end <-chan struct{}) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	var lastCycles int64 = -1
	if !in.sampled {
		in.res.NHatMin = 1 << 62
		in.res.OffsetMin, in.res.OffsetMax = 1<<62, -1<<62
		in.sampled = true
	}
	for i := 0; ; i++ {
		st := in.lim.Stats()
		in.offset.Store(int64(st.Sync.Offset))
		in.res.OffsetMin = min(in.res.OffsetMin, st.Sync.Offset+time.Duration(in.skew))
		in.res.OffsetMax = max(in.res.OffsetMax, st.Sync.Offset+time.Duration(in.skew))
		if i%10 == 0 {
			if st.Sync.Cycles != lastCycles && st.Sync.Cycles > in.start.Cycles {
				if lastCycles >= 0 {
					in.res.Cycle.Add(int64(st.Sync.LastCycle))
				}
				lastCycles = st.Sync.Cycles
			}
			in.res.CycleKeys = max(in.res.CycleKeys, st.Sync.LastCycleKeys)
			in.res.NHatMin = min(in.res.NHatMin, st.Instances)
			in.res.NHatMax = max(in.res.NHatMax, st.Instances)
			in.res.Degraded = in.res.Degraded || st.Degraded
		}
		select {
		case <-end:
			return
		case <-t.C:
		}
	}
}

// flusher syncs the instance right before every sync-burst burst, so that
// the whole fleet bursts on fresh, equal views and empty divergences.
func (in *instance) flusher(end <-chan struct{}, leave int64) {
	lead := int64(2 * time.Millisecond)
	for _, b := range in.cfg.Traffic.BurstTimes() {
		if b >= leave {
			return
		}
		if !in.clk.sleepUntil(in.cfg.T0+b-lead, end) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s := in.clk.Precise()
		err := in.lim.Flush(ctx)
		cancel()
		d := in.clk.Precise() - s
		if err != nil {
			if in.res.ErrorMsg == "" {
				in.res.ErrorMsg = fmt.Sprintf("flush: %v", err)
			}
			continue
		}
		in.res.Flushes++
		in.res.FlushMax = max(in.res.FlushMax, time.Duration(d))
		lead = max(lead, min(2*d, int64(in.cfg.SyncInterval)))
	}
}

// debugTimes times every check and flags those over 30µs (likely decided by
// Redis) in the records; for diagnosis only (LOADTEST_TIME_ALL=1).
var debugTimes = os.Getenv("LOADTEST_TIME_ALL") != ""
