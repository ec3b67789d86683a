package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/report"
)

// cpuSample is the machine's CPU time counters and load average at one
// moment, from /proc (zero where it cannot be read: not Linux).
type cpuSample struct {
	ok           bool
	total, steal uint64
	load1        float64
}

// sampleCPU reads /proc/stat's cpu line and /proc/loadavg.
func sampleCPU() cpuSample {
	var c cpuSample
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			c.load1, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return c
	}
	line, _, _ := strings.Cut(string(b), "\n")
	c.total, c.steal, c.ok = parseCPULine(line)
	return c
}

// parseCPULine sums the jiffies of /proc/stat's first line ("cpu user nice
// system idle iowait irq softirq steal guest guest_nice") and gives the
// steal among them; guest time is already counted in user.
func parseCPULine(line string) (total, steal uint64, ok bool) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += n
		if i == 7 {
			steal = n
		}
	}
	return total, steal, true
}

// machineBetween says how busy the machine was from sample a to sample b;
// nil if /proc could not be read.
func machineBetween(a, b cpuSample) *report.Machine {
	if !a.ok || !b.ok || b.total <= a.total {
		return nil
	}
	return &report.Machine{
		CPUs:  runtime.NumCPU(),
		Load1: max(a.load1, b.load1),
		Steal: float64(b.steal-a.steal) / float64(b.total-a.total),
	}
}
