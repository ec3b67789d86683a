package report

import (
	"fmt"
	"strings"
)

// Machine is how busy the machine was while a scenario ran, as Linux's
// /proc tells it.
type Machine struct {
	// CPUs the machine has.
	CPUs int `json:"cpus"`
	// Load1 is the 1-minute load average, the larger of the scenario's
	// start and end.
	Load1 float64 `json:"load1"`
	// Steal is the share of the CPUs' time the hypervisor gave to other
	// guests while the scenario ran.
	Steal float64 `json:"steal"`
}

// BusyLoad is the load average per CPU above which the machine was busy
// with more than the load test: its workers, instances and a local
// redis-server keep at most about 1.5 threads per CPU runnable.
const BusyLoad = 2.0

// BusySteal is the CPU steal above which the machine's CPUs were busy with
// other guests.
const BusySteal = 0.05

// Busy says how the machine was busy while the scenario ran, "" if it was
// not (or m is nil: not measured).
func (m *Machine) Busy() string {
	if m == nil || m.CPUs <= 0 {
		return ""
	}
	var parts []string
	if m.Load1 > BusyLoad*float64(m.CPUs) {
		parts = append(parts, fmt.Sprintf("load average %.1f on %d CPUs", m.Load1, m.CPUs))
	}
	if m.Steal > BusySteal {
		parts = append(parts, fmt.Sprintf("%s CPU steal", pct1(m.Steal)))
	}
	return strings.Join(parts, ", ")
}
