// Package fleet runs the load test's fleet: N sluice.Limiters, each with its
// own Redis client, local cache and syncer, in this process or each in its
// own child process (the binary re-executed), offering them traffic from
// package traffic and recording every decision for package oracle.
package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/record"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/store"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/traffic"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// ChildFlag is the hidden flag that makes the binary a fleet child.
const ChildFlag = "loadtest-child"

// Config is one fleet run. It is plain data: children receive it as JSON.
type Config struct {
	Target       store.Target  `json:"target"`
	Rule         policy.Rule   `json:"rule"`
	SyncInterval time.Duration `json:"sync_interval"`
	ErrorBudget  float64       `json:"error_budget"`
	Timeout      time.Duration `json:"timeout"`
	MinInstances int           `json:"min_instances"`
	// Prefix is the Redis key prefix, unique per run.
	Prefix string `json:"prefix"`
	// RunID makes instance ids unique.
	RunID string `json:"run_id"`
	// RulesFile, if set, is a rules file holding Rule that every instance
	// watches (sluice.Limiter.WatchFile, polled every WatchInterval).
	RulesFile string         `json:"rules_file,omitempty"`
	Traffic   traffic.Params `json:"traffic"`
	// MaxRecords bounds the records kept (the run stops recording, and that
	// worker stops, when it is reached).
	MaxRecords int64 `json:"max_records"`
	// Procs runs every instance in its own process.
	Procs bool `json:"procs"`
	// Skew offsets instance i's clock by i·Skew (sluice.Options.Clock).
	Skew time.Duration `json:"skew"`
	// T0 is offset 0 of the run, wall clock Unix ns (set by Run).
	T0 int64 `json:"t0"`
	// Index is the child's instance (children only).
	Index int `json:"index"`
	// Meter, if not nil, returns instance i's MeterProvider
	// (sluice.Options.MeterProvider) and a ManualReader of it, which the
	// instance reads its checks by path from (Paths); in-process instances
	// only. Without it each instance makes its own provider and reader.
	Meter func(i int) (metric.MeterProvider, *sdkmetric.ManualReader, error) `json:"-"`
}

// Geometry returns the rule's window geometry (for a TokenBucket, GCRA or
// SlidingLog rule, one sub-window of the Window).
func (c *Config) Geometry() window.Sliding { return engine.WindowGeometry(c.Rule) }

// Windowed reports whether the rule counts in sub-windows (sliding,
// weighted, fixed), as opposed to a TokenBucket, GCRA or SlidingLog.
func (c *Config) Windowed() bool {
	switch c.Rule.Algorithm {
	case policy.SlidingWindow, policy.WeightedWindow, policy.FixedWindow:
		return true
	}
	return false
}

// Result is a fleet run's output.
type Result struct {
	Records   []record.Record
	Instances []InstanceResult
	// StoreT0 is the run's start on the store clock.
	StoreT0 int64
	// Wall is the run's wall-clock length, start to last instance done.
	Wall time.Duration
	// Truncated is set when a record budget ran out; EndedAt is then the
	// offset from the run's start at which the first record was refused
	// (in one process every worker stops then; a -procs child stops its
	// own when its share of the budget runs out).
	Truncated bool
	EndedAt   time.Duration
}

// end notes an instance's truncation in the result.
func (r *Result) end(in *InstanceResult) {
	if !in.Truncated {
		return
	}
	if !r.Truncated || in.TruncatedAt < r.EndedAt {
		r.EndedAt = in.TruncatedAt
	}
	r.Truncated = true
}

// KeyNames returns the key strings of a run's key space: "k0", "k1", ….
func KeyNames(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "k" + strconv.Itoa(i)
	}
	return ks
}

// Hooks lets the caller act at an offset of the run (an outage of the
// embedded store, for example).
type Hooks struct {
	At time.Duration
	Do func()
}

// Run runs the fleet. progress, if not nil, is called about every 100ms
// with the elapsed fraction of the run.
func Run(ctx context.Context, cfg Config, progress func(float64), hooks ...Hooks) (*Result, error) {
	if cfg.Procs {
		return runProcs(ctx, cfg, progress, hooks)
	}
	return runLocal(ctx, cfg, progress, hooks)
}

// storeOffset measures the store clock minus the wall clock through TIME.
func storeOffset(ctx context.Context, t store.Target) (int64, error) {
	c := t.Client()
	defer c.Close()
	best := int64(-1)
	var off int64
	for range 5 {
		s := time.Now()
		tm, err := c.Time(ctx).Result()
		r := time.Now()
		if err != nil {
			return 0, err
		}
		if rtt := r.Sub(s).Nanoseconds(); best < 0 || rtt < best {
			best = rtt
			off = tm.UnixNano() - (s.UnixNano()+r.UnixNano())/2
		}
	}
	return off, nil
}

func watch(ctx context.Context, cfg *Config, progress func(float64), hooks []Hooks, done <-chan struct{}) {
	tk := time.NewTicker(100 * time.Millisecond)
	defer tk.Stop()
	pending := slices.Clone(hooks)
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		el := time.Duration(time.Now().UnixNano() - cfg.T0)
		for i := 0; i < len(pending); i++ {
			if el >= pending[i].At {
				go pending[i].Do()
				pending = slices.Delete(pending, i, i+1)
				i--
			}
		}
		if progress != nil && el > 0 {
			progress(min(float64(el)/float64(cfg.Traffic.Duration), 1))
		}
	}
}

func runLocal(ctx context.Context, cfg Config, progress func(float64), hooks []Hooks) (*Result, error) {
	clk := NewClock()
	defer clk.Stop()
	tp := &cfg.Traffic
	keys := KeyNames(tp.KeySpace())
	dist := traffic.NewKeyDist(tp)
	ins := make([]*instance, tp.Instances)
	defer func() {
		for _, in := range ins {
			if in != nil {
				in.close()
			}
		}
	}()
	var adm *admissionLog
	if admissionsPrefix != "" {
		adm = &admissionLog{}
	}
	for i := range ins {
		ins[i] = newInstance(&cfg, i, clk, keys, dist)
		ins[i].admissions = adm
		if join, _ := tp.Lifetime(i); join == 0 {
			if err := ins[i].open(); err != nil {
				return nil, fmt.Errorf("instance %d: %w", i, err)
			}
		}
	}
	// Every instance heartbeats once more, now that all are registered.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	for _, in := range ins {
		if in.lim != nil {
			if err := in.lim.Flush(fctx); err != nil {
				cancel()
				return nil, fmt.Errorf("instance %d: first sync: %w", in.idx, err)
			}
		}
	}
	cancel()
	off, err := storeOffset(ctx, cfg.Target)
	if err != nil {
		return nil, fmt.Errorf("reading the store clock: %w", err)
	}
	cfg.T0 = time.Now().Add(20 * time.Millisecond).UnixNano()
	tp.StoreT0 = cfg.T0 + off
	budget := record.NewBudget(cfg.MaxRecords)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		// The run ends early, for every worker at once, if the record
		// budget runs out.
		select {
		case <-ctx.Done():
			close(stop)
		case <-budget.Spent():
			close(stop)
		case <-done:
		}
	}()
	go watch(ctx, &cfg, progress, hooks, done)
	bufs := make([][]*record.Buffer, len(ins))
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bufs[i] = in.run(stop, budget, func(expect int) *record.Buffer { return record.NewBuffer(budget, expect) })
			in.close()
		}()
	}
	wg.Wait()
	close(done)
	if adm != nil {
		if err := adm.write(admissionsPrefix + "-" + tp.Profile + ".csv"); err != nil {
			return nil, fmt.Errorf("LOADTEST_ADMISSIONS: %w", err)
		}
	}
	res := &Result{StoreT0: tp.StoreT0, Wall: time.Duration(time.Now().UnixNano() - cfg.T0)}
	n := 0
	for _, bs := range bufs {
		for _, b := range bs {
			n += b.Len()
		}
	}
	res.Records = make([]record.Record, 0, n)
	for i, in := range ins {
		for _, b := range bufs[i] {
			res.Records = b.AppendTo(res.Records)
		}
		res.Instances = append(res.Instances, in.res)
		res.end(&in.res)
		if in.res.Err != "" {
			return res, fmt.Errorf("instance %d: %s", i, in.res.Err)
		}
	}
	return res, ctx.Err()
}

// runProcs starts one child process per instance.
func runProcs(ctx context.Context, cfg Config, progress func(float64), hooks []Hooks) (*Result, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("-procs: finding this binary: %w", err)
	}
	off, err := storeOffset(ctx, cfg.Target)
	if err != nil {
		return nil, fmt.Errorf("reading the store clock: %w", err)
	}
	tp := &cfg.Traffic
	// Children need time to start and register before offset 0.
	cfg.T0 = time.Now().Add(time.Second + time.Duration(tp.Instances)*50*time.Millisecond).UnixNano()
	tp.StoreT0 = cfg.T0 + off
	cfg.MaxRecords = max(cfg.MaxRecords/int64(tp.Instances), record.ChunkSize)
	cfg.Target = cfg.Target.Seal()
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		recs  []record.Record
		res   *InstanceResult
		err   error
		done  chan struct{}
	}
	kids := make([]*child, tp.Instances)
	kill := func() {
		for _, k := range kids {
			if k != nil && k.cmd.Process != nil {
				_ = k.cmd.Process.Kill()
			}
		}
	}
	for i := range kids {
		c := cfg
		c.Index = i
		doc, _ := json.Marshal(c)
		cmd := exec.Command(exe, "-"+ChildFlag)
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = childAttr()
		stdin, err := cmd.StdinPipe()
		if err != nil {
			kill()
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			kill()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			kill()
			return nil, fmt.Errorf("-procs: starting child %d: %w", i, err)
		}
		k := &child{cmd: cmd, stdin: stdin, done: make(chan struct{})}
		kids[i] = k
		if _, err := stdin.Write(append(doc, '\n')); err != nil {
			kill()
			return nil, fmt.Errorf("-procs: configuring child %d: %w", i, err)
		}
		go func() {
			defer close(k.done)
			r := bufio.NewReaderSize(stdout, 1<<20)
			for {
				var doc []byte
				var err error
				k.recs, doc, err = record.ReadFrame(r, k.recs)
				if err != nil {
					if !errors.Is(err, io.EOF) {
						k.err = err
					}
					return
				}
				if doc != nil {
					var res InstanceResult
					if err := json.Unmarshal(doc, &res); err != nil {
						k.err = err
						return
					}
					k.res = &res
				}
			}
		}()
	}
	done := make(chan struct{})
	go watch(ctx, &cfg, progress, hooks, done)
	deadline := time.Unix(0, cfg.T0).Add(tp.Duration + 30*time.Second)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var firstErr error
	for i, k := range kids {
		select {
		case <-k.done:
		case <-timer.C:
			kill()
			<-k.done
			if firstErr == nil {
				firstErr = fmt.Errorf("-procs: child %d did not finish by %v: killed", i, deadline.Format(time.TimeOnly))
			}
		case <-ctx.Done():
			kill()
			<-k.done
			if firstErr == nil {
				firstErr = ctx.Err()
			}
		}
		_ = k.stdin.Close()
		if err := k.cmd.Wait(); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("-procs: child %d: %w", i, err)
		}
		if k.err != nil && firstErr == nil {
			firstErr = fmt.Errorf("-procs: child %d stream: %w", i, k.err)
		}
	}
	close(done)
	res := &Result{StoreT0: tp.StoreT0, Wall: time.Duration(time.Now().UnixNano() - cfg.T0)}
	n := 0
	for _, k := range kids {
		n += len(k.recs)
	}
	res.Records = make([]record.Record, 0, n)
	for i, k := range kids {
		res.Records = append(res.Records, k.recs...)
		k.recs = nil
		if k.res == nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("-procs: child %d sent no result", i)
			}
			res.Instances = append(res.Instances, InstanceResult{Index: i, Err: "no result"})
			continue
		}
		res.Instances = append(res.Instances, *k.res)
		res.end(k.res)
		if k.res.Err != "" && firstErr == nil {
			firstErr = fmt.Errorf("instance %d: %s", i, k.res.Err)
		}
	}
	return res, firstErr
}

// Child is the body of a child process: it reads its Config from in (one
// JSON line), runs its instance, streams records and then its result to out,
// and exits early if in reaches EOF (the parent died).
func Child(in io.Reader, out io.Writer) error {
	br := bufio.NewReader(in)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("child: reading the configuration: %w", err)
	}
	var cfg Config
	if err := json.Unmarshal(line, &cfg); err != nil {
		return fmt.Errorf("child: bad configuration: %w", err)
	}
	cfg.Target = cfg.Target.Unseal()
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	go func() {
		// The parent keeps our stdin open until it has our result.
		_, _ = io.Copy(io.Discard, br)
		halt()
	}()
	w := bufio.NewWriterSize(out, 1<<20)
	chunks := make(chan []record.Record, 64)
	wdone := make(chan error, 1)
	go func() {
		var err error
		for c := range chunks {
			if err == nil {
				err = record.WriteRecords(w, c)
			}
		}
		wdone <- err
	}()
	clk := NewClock()
	defer clk.Stop()
	tp := &cfg.Traffic
	keys := KeyNames(tp.KeySpace())
	dist := traffic.NewKeyDist(tp)
	inst := newInstance(&cfg, cfg.Index, clk, keys, dist)
	if admissionsPrefix != "" {
		inst.admissions = &admissionLog{}
		defer func() {
			_ = inst.admissions.write(fmt.Sprintf("%s-%s-i%d.csv", admissionsPrefix, tp.Profile, cfg.Index))
		}()
	}
	if join, _ := tp.Lifetime(cfg.Index); join == 0 {
		if err := inst.open(); err != nil {
			inst.res.Err = err.Error()
		} else if clk.sleepUntil(cfg.T0-int64(200*time.Millisecond), stop) {
			// Heartbeat again once every sibling has registered.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = inst.lim.Flush(ctx)
			cancel()
		}
	}
	var bufs []*record.Buffer
	if inst.res.Err == "" {
		budget := record.NewBudget(cfg.MaxRecords)
		go func() {
			// This child's share of the budget ran out: its workers
			// stop at once.
			<-budget.Spent()
			halt()
		}()
		bufs = inst.run(stop, budget, func(expect int) *record.Buffer {
			b := record.NewBuffer(budget, expect)
			b.Flush = func(c []record.Record) { chunks <- c }
			return b
		})
	}
	for _, b := range bufs {
		b.Close()
	}
	inst.close()
	close(chunks)
	if err := <-wdone; err != nil {
		return fmt.Errorf("child: writing records: %w", err)
	}
	doc, err := json.Marshal(inst.res)
	if err != nil {
		return err
	}
	if err := record.WriteJSON(w, doc); err != nil {
		return err
	}
	return w.Flush()
}
