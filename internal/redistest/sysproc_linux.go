//go:build linux

package redistest

import (
	"bytes"
	"fmt"
	"os"
	"time"
)

// waitStopped waits (bounded) until the process is in the stopped state, so
// that Pause returns only once the server really stopped answering.
func waitStopped(pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	path := fmt.Sprintf("/proc/%d/stat", pid)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		// Format: "pid (comm) S ...": the state follows the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
			if st := b[i+2]; st == 'T' || st == 't' {
				return
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}
