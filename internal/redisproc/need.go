package redisproc

import "os"

// TB is the part of testing.TB that NeedServer calls, so that this package,
// which the load test's binary links, does not import testing.
type TB interface {
	Helper()
	Fatal(args ...any)
	Skip(args ...any)
}

// NeedServer skips the test tb without a redis-server in PATH, or fails it
// when the environment variable CI is "true": CI must test against real
// Redis. Tests that start a server through Start call it first.
func NeedServer(tb TB) {
	tb.Helper()
	if Available() {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal("redis-server not found: CI requires real Redis")
	}
	tb.Skip("needs a redis-server in PATH")
}
