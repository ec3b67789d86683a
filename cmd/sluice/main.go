// Command sluice runs sluice outside Go: envoy's rate limit service
// answered from local decisions (serve), a configuration checker for CI
// pipelines (validate), one decision from the shell (check), and what the
// fleet's store holds (inspect).
//
//	sluice serve -config ratelimit.yaml [-redis redis://host:6379] [-listen 127.0.0.1:8081]
//	sluice validate FILE...
//	sluice check -config FILE [-redis URL] KEY=VALUE...   (an envoy file)
//	sluice check -config FILE [-redis URL] RULE KEY       (a sluice file)
//	sluice inspect -config FILE... [-redis URL] [-json] [KEY=VALUE... | RULE KEY]
//
// Run "sluice -h" for the details; docs/envoy.md puts sluice in front of
// envoy.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// usage is the text of "sluice -h".
const usage = `sluice: rate limiting across a fleet, outside Go.

Usage:
  sluice serve -config FILE [-redis URL [-redis-cluster]] [-listen ADDR]
               [-http ADDR] [-headers SET] [-prefix P]
  sluice serve -runtime-root DIR [-runtime-subdirectory SUB]
               [-runtime-appdirectory APP] [...as above]
  sluice validate FILE...
  sluice check -config FILE [-redis URL] [-prefix P] [-n COST] KEY=VALUE...
  sluice check -config FILE [-redis URL] [-prefix P] [-n COST] RULE KEY
  sluice inspect -config FILE [-config FILE...] [-redis URL [-redis-cluster]]
                 [-prefix P] [-domain D] [-json] [KEY=VALUE... | RULE KEY]
  sluice inspect -runtime-root DIR [-runtime-subdirectory SUB] [...as above]

serve
  Answers envoy's rate limit service (gRPC envoy.service.ratelimit.v3.
  RateLimitService, ShouldRateLimit) from a sluice limiter built from FILE:
  an envoy ratelimit configuration as-is, or sluice's own format (a
  descriptor of one entry whose key is a rule name and whose value the key
  to count). Each descriptor gets OK or OVER_LIMIT with the current limit,
  the limit remaining and the duration until reset; a descriptor that no
  limit matches, or a domain other than the file's, is answered OK with no
  limit, and so is one whose limit another limit of the request replaces
  (envoy's replaces); shadow_mode limits count but answer OK.
  hits_addend 0 on the request counts 1 (envoy's default); a
  descriptor's own hits_addend set to 0 only looks, as this instance sees
  the key (nothing is counted); a cost above the limit is OVER_LIMIT.
  Without -redis every instance limits on its own; with it the instances
  sharing the Redis and the -prefix form one fleet. FILE is watched and
  applied again when it changes (a change that does not load keeps the
  rules in force, and is logged). SIGINT or SIGTERM stops the server and
  pushes the last counts to Redis. The server also answers gRPC health
  checks (grpc.health.v1): SERVING until it stops. With -http it also
  serves, as envoyproxy/ratelimit does, POST /json (a RateLimitRequest in
  protojson, answered in protojson: 200 if OK, 429 if OVER_LIMIT, 400 for a
  bad request), GET /healthcheck (200 "OK" until it stops, then 503) and
  GET /metrics (the limiter's OpenTelemetry metrics, docs/observability.md,
  in Prometheus' text format).
  Instead of -config, serve reads envoyproxy/ratelimit's runtime layout:
  every *.yaml and *.yml file of DIR/SUB/APP (APP default config), one
  domain per file (two files of one domain are an error), named by the
  flags or by envoyproxy/ratelimit's environment variables RUNTIME_ROOT,
  RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY, RUNTIME_IGNOREDOTFILES (true:
  skip files whose name starts with '.') and RUNTIME_WATCH_ROOT; a flag
  wins over its variable. The directory is polled every second: a change
  of its files, or DIR (a symbolic link) swapped to another tree, is
  applied once it has settled, whatever RUNTIME_WATCH_ROOT says; a change
  that does not load keeps the rules in force, and is logged. A sluice
  file in the directory answers every domain no envoy file names.
  A descriptor's own limit override (its "limit" field) is not supported:
  the file's limit applies.
  A request is refused with InvalidArgument when it has no domain, no
  descriptor or more than 64, a descriptor with no entry or more than 16,
  an empty key, or a key or value over 1024 bytes; a message over 4 MiB
  with ResourceExhausted.

validate
  Loads each FILE as serve would. Prints "FILE: ok: ..." for a good one and
  the loader's message (FILE:LINE:COLUMN: field: what to fix) for a bad
  one. Exit status 1 if any file is bad, 0 otherwise.

check
  One decision, counted as a request of cost COST (default 1), printed on
  one line. With -redis it is counted in the fleet's store, and the
  remaining and reset printed are the fleet's, read back from it. For an
  envoy file the arguments are the entries of one descriptor of the file's
  domain; for a sluice file a rule name and a key. Flags come before them.
  Exit status 0 if allowed (or no limit applies), 3 if denied, 1 on an
  error.

inspect
  Prints the rules of each FILE (name, algorithm, mode, limit per window;
  without -config, of the files of the runtime layout serve reads, from the
  same flags and environment variables) and, with -redis, what the fleet's store holds under the prefix: its
  health (three PINGs' fastest and slowest round trip, its version and
  clock), the live instances of the registry (each with the time until it
  expires unless it heartbeats), and, given a key, the key's fleet count in
  the window, the limit remaining and the time until the window holds none
  of its counts, with the counts of its buckets. The count is the store's:
  what the instances pushed, which trails their own decisions by at most
  the error budget. The key is an envoy file's descriptor (KEY=VALUE...,
  of domain D or of the first file that matches it) or a rule name and a
  key. Only window rules (sliding, weighted, fixed) of mode eventual or
  strict are counted in a form inspect reads. -json prints the same as one
  JSON object. Exit status 1 if a file does not load or the store does not
  answer.

Flags:
  -config FILE   the configuration (envoy's format or sluice's)
  -redis URL     the shared Redis, redis://[user:pass@]host:port[/db] or
                 host:port; without it the limits are this process's own
  -listen ADDR   serve's gRPC address (default 127.0.0.1:8081)
  -http ADDR     serve's HTTP address for /json, /healthcheck and /metrics
                 (default: none)
  -headers SET   the response headers serve asks envoy to add: ratelimit
                 (IETF RateLimit and RateLimit-Policy, one item per limited
                 descriptor), x-ratelimit (X-RateLimit-Limit, -Remaining and
                 -Reset in seconds, of the binding descriptor), both
                 comma-separated, or none (default)
  -redis-cluster -redis is a Redis Cluster: a node's address, or
                 redis://host:port?addr=host2:port2 to name more
  -prefix P      the Redis key prefix the fleet shares (default sluice)
  -runtime-root DIR, -runtime-subdirectory SUB, -runtime-appdirectory APP,
  -runtime-ignoredotfiles BOOL, -runtime-watch-root BOOL
                 serve's envoyproxy/ratelimit runtime layout (above); default
                 the environment variables RUNTIME_ROOT... of the same names
  -json          inspect prints JSON
  -domain D      inspect's envoy domain of a KEY=VALUE descriptor
  -sync-interval D
                 how often counts are pushed to Redis and totals pulled
                 (default 100ms)

Exit status 2 on a usage error.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK     = 0
	exitError  = 1
	exitUsage  = 2
	exitDenied = 3
)

// run runs the subcommand in args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "serve":
		return runServe(ctx, args[1:], stderr, nil)
	case "validate":
		return runValidate(args[1:], stdout, stderr)
	case "check":
		return runCheck(ctx, args[1:], stdout, stderr)
	case "inspect":
		return runInspect(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}
