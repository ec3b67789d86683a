// Command loadtest is the bundled load test of sluice: it runs a fleet of
// sluice.Limiters against one Redis, offers them ten traffic profiles
// (steady, bursty, bursts right after a sync, window-boundary attacks, a cold
// start, Zipf over many keys, key churn, ramps, instances joining and
// leaving, and every worker checking flat out), records every decision, and
// measures the fleet against exact references.
//
// With no flags it needs nothing else running: it starts a throwaway
// redis-server on a free loopback port if one is in PATH (no persistence, in
// a temporary directory, stopped at the end, and on Linux killed with the
// load test), or else an embedded Redis-compatible server (miniredis, a
// stand-in in the load test's own process: accuracy figures hold, Redis latency and
// memory do not; -embedded asks for it), runs every profile for 5 s on 4
// in-process instances (the last, throughput, for 2 s), and prints a report
// (about a minute in all):
//
//	go run ./cmd/loadtest
//
// The stand-in runs the sync script about fifty times slower than Redis and
// shares the process's CPUs with the workers: a check that waits for it
// waits milliseconds, and in the throughput profile, where every worker runs
// flat out, tens of milliseconds, which caps the checks a second at tens or
// hundreds of thousands where a real Redis on the same machine gives
// millions.
//
// Against a real Redis or a Redis Cluster:
//
//	go run ./cmd/loadtest -redis redis://127.0.0.1:6380
//	go run ./cmd/loadtest -redis 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
//	go run ./cmd/loadtest -redis 'redis://127.0.0.1:7000?addr=127.0.0.1:7001'
//
// A single address that turns out to be a cluster node (INFO cluster) is used
// as a cluster seed.
//
// The throughput profile, the default run's last, has every worker check as
// fast as it can for 2 s (at most: -duration shortens it): how many checks a
// second the fleet sustains, with the same accuracy tables. Every check is
// recorded, so it has a record budget of its own (32 million records, about
// 770 MB; -max-records sets every profile's); a scenario whose budget runs
// out ends then, for every worker (of the process, with -procs), and its
// notes say when. Flat out, every key is offered far above its limit, and a
// run of two windows ends mid-cycle: its utilization is judged on the
// windows wholly inside the run (per key, what the fleet held in each such
// window against what the exact log held), not on its totals. It is left out
// of -sim runs.
//
// Four operations profiles, run only when named (-profile ops names them
// all), act on the running fleet as an operator does, and are judged like
// the others and also on check errors (every check must get a decision,
// none an error: the verdict's "no check errors" column, shown when one of
// them ran). Each offers a few keys on a regular schedule whatever -rate
// and -cost, each check costing 1: half quiet (never above 0.8·L in a
// window, so any denial of theirs is a false denial), half hot (2.2·L per
// window); the notes give each key's pattern and its denials.
//
//   - shift: a key's traffic moves between instances: all at once (a quiet
//     key uses 0.3·L on one instance within a tenth of a window, then 0.5·L
//     within the next tenth on the next instance, every 1.4 windows; a hot
//     key hops at a third and at two thirds of the run), round robin (each
//     check on the next instance), draining (from a third to two thirds of
//     the run one instance's share of the key falls to nothing while
//     another's grows), and sticky (a control that never moves). It needs
//     two instances.
//   - deploy: the instances are replaced one by one while running: each is
//     drained (its traffic to the others), closed half a window later (at
//     most a quarter of its slot; Close pushes its last counts), and after
//     a pause a new limiter with a new InstanceID starts in its place and
//     gets its traffic back. Sticky keys go to their home instance (to the
//     next one meanwhile; a quiet one bursts as its home is drained),
//     spread keys round robin over the instances up. It needs two
//     instances, also with -procs (each child replaces its own limiter).
//   - reload: every instance watches one rules file (Limiter.WatchFile,
//     polled every 100 ms) in a temporary directory, holding another rule
//     before the load test's; from a fifth to four fifths of the run it is
//     rewritten in place every quarter second, at a random phase of a poll,
//     as a shell's > does: truncated, 40 ms later its first part (up to the
//     load test's rule), 40 ms later the rest; the rules stay the same, but
//     from the middle rewrite on the other rule's limit is changed (the
//     judged rule's limit stays, so that the oracle holds).
//   - store-loss: FLUSHALL at 30 % of the run, and again every fifth of it
//     (at least a window and a sub-window apart) until 80 % (on every
//     master of a cluster; the embedded stand-in flushes too); the notes
//     say when each happened. FLUSHALL empties the
//     whole store, so on -redis the profile first checks that the store
//     holds nothing but load-test keys (prefix "lt:" in its database, and
//     no other database in use) and refuses to run otherwise; on the
//     throwaway redis-server or the stand-in it just runs.
//
// Three composition profiles, run only when named (-profile
// layered,elastic,concurrency), build their own rules and report their own
// figures after the report: layered (AllowAll against a tight and a wide
// rule: over-admission against the error budget, and the store's count
// under the wide rule against what was admitted), elastic (a heavy client
// under an elastic rule gets the spare capacity alone and falls to its
// Limit when others arrive) and concurrency (an InFlight rule of 20 slots
// per key on the fleet, each instance behind an adaptive limiter, requests
// holding both slots for a modelled server's time, which doubles mid-run,
// and the last instance killed at 30 %: its verdict, from what was
// observed, is the most slots held at once per key against the limit, the
// killed instance's leases lapsing within the lease TTL, no lease left in
// the store at the end, the adaptive limit falling after the step and
// settling, and sheddable requests shed before critical ones; it needs two
// instances).
//
// # The fleet
//
// -instances N limiters, each with its own go-redis client (connection pool),
// local cache and syncer, each driven by -workers goroutines. With -procs each
// instance runs in its own OS process: the binary re-executes itself with a
// hidden flag, reads its configuration from stdin and streams its admission
// records back over stdout, binary-encoded (package record); without -redis
// the children connect to the parent's redis-server or miniredis on loopback.
//
// # Measurements
//
// Every check is recorded (decision time on the store clock, key, instance,
// cost, decision) into per-goroutine buffers without locks. The decision time
// is the limiter's own: Decision.ResetAfter is a function of it, so it is
// recovered exactly (modulo the sub-window) from ResetAfter and our reading of
// the store clock (time.Now plus Limiter.Stats().Sync.Offset). A check whose
// call, from the clock read before it to the one after it, outlasted about a
// quarter sub-window (it waited for Redis, or its goroutine for a CPU: a
// fleet checking flat out on 2 cores keeps goroutines waiting for hundreds of
// milliseconds) has several candidate times a sub-window apart; it is
// recorded at the latest, and the oracle counts such an admission in the
// fleet's over-admission and own estimate only where every candidate would
// count it (the report's notes say how many there were). Package oracle
// then replays the merged stream, per key in time order, through an exact
// sliding log (reference.Log) and through the rule's own algorithm run centrally
// (reference.Counter), and reports over-admission (max over t of admitted in
// (t−W, t] ÷ L − 1; max and p99 over the keys offered more than L), the
// algorithm's own error (the central counter against the log), the fleet's
// error (fleet minus central, and the fleet's admissions as the algorithm
// counts them, which the error budget bounds), utilization, false denials and
// wrong decisions. Alongside: checks/s, Allow latency (every check of a paced
// profile, 1 in 64 flat out; exact p50, p99, p99.9), Redis commands and round
// trips per instance per second, urgent syncs, sync-cycle latency, N̂, the
// spread of the instances' store clocks, and bytes per key (local heap
// growth; MEMORY USAGE on a real Redis).
//
// Which checks waited, and why: each instance's limiter gets a MeterProvider
// with an OpenTelemetry ManualReader (on -metrics' provider with -metrics),
// from which the instance reads its checks by path at the end (sluice.checks:
// local; urgent, a key at its divergence cap or untracked; strict; fallback,
// Redis failed or was too slow), with the urgent round trips, reservations
// and early syncs of Limiter.Stats, and why each urgent check's key had no
// local allowance left (Stats().Sync.Waits: near the limit, where no lease is
// granted from the last tenth; never synced yet; a sub-window's start after
// its lease ended; the sub-window's lease used up; no lease and the cap used
// up). The oracle splits Allow's latency between the checks made while their
// key was offered above L in a window holding the check (where an instance
// may have used its share and must ask Redis) and the others (where no check
// should wait), and of the others the slow ones made while their key was
// offered above 0.9·L, with the p99.9 of those offered at most 0.9·L; each
// timed check records whether its instance had a round trip to Redis for
// checks during the call: a slow check without one waited for a CPU, not for
// Redis.
//
// Beside sluice: after the steady and throughput scenarios the same workers,
// on the same schedule and keys, check two bare local limiters, each as long
// as steady (as many timed checks: its p99.9 is the machine's own tail with
// no store) and for the first half second of throughput:
// golang.org/x/time/rate (a token bucket per key in an xsync.MapOf: the usual
// Go limiter, with nothing to keep in step) and sluice with the rule in Mode
// Local (sluice without the store), and the report prints their checks/s and
// Allow p50, p99, p99.9 next to sluice's, and their p99.9 beside a slow
// p99.9 of steady's keys within their limit in the verdict (not for a
// sweep's points, nor with -procs).
//
// # Output
//
// Tables on stdout that fit 120 columns, each figure that may look alarming
// explained in a legend line under its table (-wide: every column; -markdown:
// Markdown tables, every column), ending with the verdict: per profile, the
// promises sluice makes, ✓ or ✗ — the fleet's part of the real-window
// over-admission within ε (the algorithm's own part shown beside it, not
// judged), no false denials, utilization ≥ 90 % for keys offered ≥ 2·L —
// with Allow's p99.9 over the checks of keys within their limit against a
// 50 µs target (✓ or ✗, a target on the machine, not a promise) and, under
// the table, why each p99.9 above 50 µs was slow (how many slow checks ran
// during a round trip of their instance to Redis, how many waited for a CPU,
// and what Redis decided). Under the table each ✗ says whose it is: the
// fleet's, a broken promise (the fleet did worse than the rule's algorithm
// run centrally on the same checks); the algorithm's documented limit (run
// centrally on the same checks it falls as short, as a sliding window's
// utilization does: shown, not counted as broken); or, for p99.9, the
// machine's (a load average above 2 per CPU or CPU steal above 5 % while the
// scenario ran, or bare local limiters slow too) or Redis waits. A last line
// counts the promises the fleet broke. JSON with -json. With -out DIR: plots (SVG, or PNG with -png) and
// report.json: admitted per sliding window against the limit over time for
// each scenario; with -sweep (sync=…, instances=…, budget=…, precision=…,
// rate=…, keys=…) over-admission and sync traffic against the swept
// parameter.
//
// Progress goes to stderr: a bar when stderr is a terminal, otherwise one
// line per finished profile (no carriage returns in a log). go-redis's own
// log lines ("connection pool: failed to dial" while the store is down, as
// in the -outage demo) are never printed: the scenario's notes count them,
// and with -out they are kept in DIR/redis.log.
//
// # Simulation
//
// -sim runs the counting algorithms of package window on a virtual clock,
// deterministic under -seed and much faster than real time, at the algorithm
// level (no fleet): it reproduces the comparison of seed article 000 (100
// requests per minute, random traffic: the exact sliding window against the
// fixed window, the current + weighted previous window and 15 s sub-windows)
// and goes on to the boundary attack and B = 1, 5, 10, 60.
//
// Every run is bounded: each scenario lasts -duration (at most 1 h; 30 days
// of virtual time with -sim; the throughput profile at most 2 s) and keeps at
// most its record budget; children are killed 30 s after their deadline. For diagnosis, LOADTEST_TIME_ALL=1
// times every check (marking the slow ones in the records) and
// LOADTEST_DUMP=prefix writes each scenario's records as CSV, and
// LOADTEST_ADMISSIONS=prefix every admission with the clock readings around
// its call (a decision is made during its call: the admissions whose calls
// lie within one window were decided in it, whatever the recovered times).
//
// docs/accuracy.md and the pages it links to (docs/accuracy-*.md) are
// generated from load-test runs by cmd/loadtest/accuracy.sh.
package main
