// Package adaptive is a concurrency limiter for one instance whose limit
// follows measured latency, and which sheds load by priority.
//
// A Limiter admits a request while fewer requests than its current limit
// L(t) are in flight. Each admitted request holds a Slot until it ends; its
// Release reports the outcome (Success, Dropped, Ignored), and the Limiter
// hands the request's latency to its Algorithm, which moves L(t):
//
//   - AIMD raises the limit by Increase per limit's worth of successes and
//     multiplies it by Backoff when a request is dropped or slower than
//     Threshold (at most once per round trip).
//   - Gradient2 compares a long-term average of the latency with its mean
//     over the last short window: gradient = clamp(Tolerance·long/short,
//     0.5, 1), and moves the limit towards limit·gradient + Queue by a
//     fraction Smoothing.
//
// L(t) always stays within [Options.Min, Options.Max], the floor and the
// ceiling.
//
// A request carries a Priority. Priority p is admitted while
//
//	in flight < ⌊L(t) · share(p)⌋
//
// with share(Critical) = 1 and the shares of Default and Sheddable set by
// Options.Shares (0.95 and 0.8 by default). So as the limit fills, sheddable
// requests are refused first, then default ones, and critical requests last.
// A refusal is immediate: the Limiter never queues. It is a result, not an
// error: Acquire returns a Slot whose OK is false, and counts the refusal in
// Stats.
//
// Acquire costs a context check, three atomic loads, one compare-and-swap
// and a clock read (a refusal, no clock read); Release a compare-and-swap,
// an atomic decrement, a clock read and the algorithm's update under a short
// mutex. Slots are pooled: neither allocates.
//
// The contract of a Slot does not depend on how the limit is set: an
// admission returns a Slot, the caller releases it once with the request's
// Outcome (further releases do nothing; a release after Close still frees
// the slot).
//
// See docs/concurrency.md for the model and measured figures.
package adaptive
