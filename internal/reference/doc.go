// Package reference holds sluice's reference models: plain, single-key,
// not concurrent implementations of what the limiter computes lock-free and
// in Redis, against which the tests and the load test's oracle measure it.
//
//   - Counter: a sliding (or fixed) window counter on plain integers, with
//     the geometry and the admit test of package window;
//   - Log: the exact sliding-window log, which keeps every admission still
//     in the window;
//   - TokenBucket: the classic token bucket (a level of tokens refilled at
//     one every T), which admits exactly what window.GCRA admits;
//   - RoundWarm: a window.WarmUp state as package localcache packs it, so
//     that a WarmUp rounded after each admission decides what the table
//     decides.
//
// This package is internal to sluice: no compatibility promise.
package reference
