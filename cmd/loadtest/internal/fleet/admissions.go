package fleet

import (
	"bufio"
	"fmt"
	"os"
	"sync"
)

// admissionsPrefix, from LOADTEST_ADMISSIONS, turns on a diagnosis mode:
// every admission is also written, with the clock readings around its call,
// to prefix-<profile>.csv (prefix-<profile>-i<instance>.csv from a -procs
// child). A decision is made during its call, so the admissions whose calls
// all lie within one interval of W were all decided in it, whatever the
// time recovered from Decision.ResetAfter says: a check of the fleet's
// bound in real time that depends on no clock but the caller's.
var admissionsPrefix = os.Getenv("LOADTEST_ADMISSIONS")

// admission is one admitted check, times on the store clock in ns.
type admission struct {
	key, cost     uint32
	inst          uint16
	early         uint8
	start, end, t int64 // call start (no later than), call end, recorded time
	reset         int64 // Decision.ResetAfter
	remaining     int64 // Decision.Remaining
}

// admissionLog collects admissions in the diagnosis mode (a lock per
// admission: tens of thousands a run, not millions).
type admissionLog struct {
	mu   sync.Mutex
	rows []admission
}

func (l *admissionLog) add(a admission) {
	l.mu.Lock()
	l.rows = append(l.rows, a)
	l.mu.Unlock()
}

// write writes the admissions to file as CSV.
func (l *admissionLog) write(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "key,inst,call_start,call_end,t,early,reset_after,remaining,cost")
	l.mu.Lock()
	for _, a := range l.rows {
		fmt.Fprintf(w, "%d,%d,%d,%d,%d,%d,%d,%d,%d\n", a.key, a.inst, a.start, a.end, a.t, a.early, a.reset, a.remaining, a.cost)
	}
	l.mu.Unlock()
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
