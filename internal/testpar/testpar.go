// Package testpar sets how many parallel tests a test binary runs at once in
// the -short lane.
//
// The testing package runs GOMAXPROCS parallel tests at once unless told
// otherwise (-parallel), which suits tests that keep a CPU busy. Most of the
// parallel tests of the library's Redis-backed packages instead wait on
// real time: for a window's boundary, a fleet's sync interval, a store's
// timeout or a Redis process to start or fail over, since a real store's
// clock and processes cannot be virtualised. On a two-core machine they
// ran two at a time while the CPUs mostly idled. The full lane keeps the
// default, so the race detector's slower checks never crowd each other.
package testpar

import (
	"flag"
	"runtime"
	"strconv"
	"testing"
)

// Short parses the command line (the caller is a TestMain, before m.Run)
// and, in the -short lane, raises -test.parallel to n when the command line
// sets neither it nor -fuzz and GOMAXPROCS is lower. It returns the number of
// parallel tests the binary will run at once.
func Short(n int) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.parallel")
	if f == nil {
		return 1
	}
	// -test.parallel also sets how many fuzz workers -fuzz starts: a fuzz
	// run keeps one per CPU.
	set := false
	flag.Visit(func(v *flag.Flag) { set = set || v == f || v.Name == "test.fuzz" && v.Value.String() != "" })
	if testing.Short() && !set && n > runtime.GOMAXPROCS(0) {
		_ = f.Value.Set(strconv.Itoa(n))
	}
	got, _ := strconv.Atoi(f.Value.String())
	return got
}
