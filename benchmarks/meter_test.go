package benchmarks

import (
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// cpuMeter measures the CPU time a process spends besides its timed loops,
// per second of wall time: the process's CPU time (getrusage RUSAGE_SELF)
// minus the loop goroutines' own, each locked to its OS thread for the
// loop (RUSAGE_THREAD). What remains is what runs beside the loop: a
// limiter's background goroutines (sluice's syncer, ticker and sweeper), the
// garbage collector, the Go runtime. It is reported as bg-cpu-ms/s (1000 =
// one core busy all the time). For sluice eventual the syncer's own share is
// this figure minus that of the same rule with an idle syncer. Part of it,
// and part of the loop's own time (mark assists), is the garbage collector:
// gc-cpu-ms/s is the runtime's own estimate of its CPU time over the loop
// (runtime/metrics /cpu/classes/gc/total:cpu-seconds).
//
// It also reports the loop goroutines' CPU time per check, loop-cpu-ns/op:
// unlike ns/op (wall time), it leaves out the time the loop's threads wait
// for a core, so on a machine busy with other work it stays close to what
// the check costs.
//
// Every in-process benchmark is metered, so that the thread locking, which
// costs a loop nothing measurable, is the same for all of them.
type cpuMeter struct {
	b      *testing.B
	prof   *os.File // the loop's CPU profile (-loopprofile), or nil
	wall   time.Time
	proc   time.Duration
	loops  atomic.Int64  // ns of CPU of the loop goroutines
	gc     float64       // the runtime's GC CPU estimate at the start, in seconds
	serial time.Duration // the locked loop thread's CPU time at the start
	locked bool
	ok     atomic.Bool
}

// loopProfile names a directory into which every metered loop writes a CPU
// profile of the whole process over that loop alone (its setup left out),
// named after the benchmark. It cannot be combined with -test.cpuprofile.
var loopProfile = flag.String("loopprofile", "", "write a CPU profile of each metered loop into this directory")

// meter starts measuring. With serial, the calling goroutine is the loop:
// it is locked to its thread until report.
func meter(b *testing.B, serial bool) *cpuMeter {
	m := &cpuMeter{b: b}
	m.ok.Store(true)
	if *loopProfile != "" {
		name := strings.NewReplacer("/", "_", "=", "-").Replace(b.Name())
		f, err := os.Create(filepath.Join(*loopProfile, name+".prof"))
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			b.Fatal(err)
		}
		m.prof = f
	}
	if serial {
		runtime.LockOSThread()
		t, ok := ThreadCPU()
		m.serial, m.locked = t, true
		m.ok.Store(ok)
	}
	p, ok := ProcessCPU()
	if !ok {
		m.ok.Store(false)
	}
	m.proc, m.gc, m.wall = p, gcCPU(), time.Now()
	return m
}

// gcCPU returns the runtime's estimate of the CPU time its garbage
// collector has spent, in seconds (/cpu/classes/gc/total:cpu-seconds).
func gcCPU() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64()
}

// loop is called by each goroutine of a parallel loop before it starts; the
// function it returns, when that goroutine is done.
func (m *cpuMeter) loop() func() {
	runtime.LockOSThread()
	t0, ok := ThreadCPU()
	return func() {
		t1, ok1 := ThreadCPU()
		runtime.UnlockOSThread()
		if !ok || !ok1 {
			m.ok.Store(false)
			return
		}
		m.loops.Add(int64(t1 - t0))
	}
}

// report stops measuring and reports bg-cpu-ms/s.
func (m *cpuMeter) report() {
	wall := time.Since(m.wall)
	if m.prof != nil {
		pprof.StopCPUProfile()
		_ = m.prof.Close()
	}
	gc := gcCPU()
	p, ok := ProcessCPU()
	if m.locked {
		t, ok1 := ThreadCPU()
		runtime.UnlockOSThread()
		m.loops.Add(int64(t - m.serial))
		ok = ok && ok1
	}
	if !ok || !m.ok.Load() || wall <= 0 {
		return
	}
	bg := p - m.proc - time.Duration(m.loops.Load())
	m.b.ReportMetric(max(0, float64(bg))/1e6/wall.Seconds(), "bg-cpu-ms/s")
	m.b.ReportMetric((gc-m.gc)*1e3/wall.Seconds(), "gc-cpu-ms/s")
	if m.b.N > 0 {
		m.b.ReportMetric(float64(m.loops.Load())/float64(m.b.N), "loop-cpu-ns/op")
	}
}
