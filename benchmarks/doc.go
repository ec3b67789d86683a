// Package benchmarks measures sluice side by side with the bare floor and
// with other Go rate limiters, in one run on one machine.
//
// It is its own module (github.com/sluicehq/sluice/benchmarks, with a replace
// directive to ../) so that the peers it compares against never enter the
// main module's dependencies. The package itself only holds helpers: the key
// sets and their precomputed draws, and a throwaway redis-server starter. The
// measurements are Go benchmarks in the _test files:
//
//	BenchmarkCheck        per-key checks of the in-process limiters and the floor
//	                      (bare, and behind sluice's API) on five key sets (hot,
//	                      10k, 1M Zipf 1.1, 1M Zipf 1.0, churn), with the CPU
//	                      the process spends beside the loop (the syncer's)
//	BenchmarkAlgorithms   Limiter.Allow of a Local rule of every algorithm (the
//	                      windows, TokenBucket, GCRA, GCRA with WarmUp,
//	                      SlidingLog) beside the floor, on the hot key and 10k keys
//	BenchmarkCheckRemote  per-key checks that go to Redis (sluice Strict, redis_rate)
//	BenchmarkTimeNow      time.Now alone, for scale
//	BenchmarkSync         the syncer against a real Redis: key-syncs/s, cycle latency, bytes
//	BenchmarkRedisINCR    redis-benchmark INCR against the same Redis, for scale
//	BenchmarkMemory       bytes per tracked key at 1M keys (local and eventual)
//
// run.sh runs them all and writes ../docs/performance.md. `go test ./...`
// runs only the fast checks (TestDistributions and friends). Unix only.
package benchmarks
