#!/usr/bin/env bash
# Runs `sluice serve` and envoyproxy/ratelimit side by side on the same
# configuration and the same throwaway redis-server, drives each with
# rlsbench (envoy's generated gRPC client), and writes docs/performance-rls.md.
#
#   ./run.sh                 5 s per run, 8 callers
#   ./run.sh -duration 10s   longer runs
#   ./run.sh -out DIR        keep the logs and raw results in DIR
#                            (default: a temporary directory, removed)
#   ./run.sh -no-doc         print the page instead of writing the doc
#
# Two measurements, each for both servers:
#   - one server, 8 callers, 1000 keys whose limit is never reached:
#     decisions/s and latency percentiles (what a check costs), and the
#     same against a server that answers OK without deciding (gRPC alone);
#   - two servers of each sharing the Redis, 8 callers split between them,
#     10 keys of limit 1000 per hour asked until long past it: how many of
#     each key the fleet admitted past its limit (over-admission).
#
# Needs Go, redis-server and the Go module proxy (or a module cache holding
# envoyproxy/ratelimit): envoyproxy/ratelimit is built from its Go module,
# github.com/envoyproxy/ratelimit/src/service_cmd at $RATELIMIT_VERSION.
# Every server runs on a free loopback port (the Redis never on 6379) and
# is stopped at the end.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
duration=5s
out=""
doc="$repo/docs/performance-rls.md"
RATELIMIT_VERSION="${RATELIMIT_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}"
while [ $# -gt 0 ]; do
	case "$1" in
	-duration | --duration) duration="$2"; shift ;;
	-out | --out) out="$2"; shift ;;
	-no-doc | --no-doc) doc="" ;;
	-h | -help | --help) sed -n '2,24p' "$0"; exit 0 ;;
	*) echo "run.sh: unknown argument $1 (try -help)" >&2; exit 2 ;;
	esac
	shift
done
for bin in go redis-server; do
	command -v "$bin" >/dev/null || { echo "run.sh: $bin not found in PATH" >&2; exit 1; }
done

keep=1
if [ -z "$out" ]; then
	out="$(mktemp -d)"
	keep=0
fi
mkdir -p "$out/bin"
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	if [ "$keep" = 0 ]; then rm -rf "$out"; fi
}
trap cleanup EXIT

echo "run.sh: building rlsbench, sluice and envoyproxy/ratelimit@$RATELIMIT_VERSION" >&2
(cd "$here" && GOWORK=off go build -o "$out/bin/rlsbench" .)
(cd "$repo/cmd/sluice" && go build -o "$out/bin/sluice" .)
if ! GOBIN="$out/bin" GOWORK=off GOFLAGS=-mod=mod go install "github.com/envoyproxy/ratelimit/src/service_cmd@$RATELIMIT_VERSION" 2>"$out/ratelimit-build.log"; then
	cat "$out/ratelimit-build.log" >&2
	echo "run.sh: could not build envoyproxy/ratelimit from its Go module (github.com/envoyproxy/ratelimit/src/service_cmd@$RATELIMIT_VERSION):" >&2
	echo "run.sh: it needs the Go module proxy (GOPROXY) or a module cache that holds it and its dependencies; nothing was measured" >&2
	exit 1
fi
bench="$out/bin/rlsbench"

# The configuration both servers read, in envoyproxy/ratelimit's runtime
# layout (which `sluice serve` reads too).
mkdir -p "$out/runtime/ratelimit/config"
cat >"$out/runtime/ratelimit/config/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: bench
    rate_limit:
      unit: minute
      requests_per_unit: 100000
  - key: fleet
    rate_limit:
      unit: hour
      requests_per_unit: 1000
EOF
export RUNTIME_ROOT="$out/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false

rport=$("$bench" -free-port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$out/redis.log" 2>&1 &
pids+=($!)
"$bench" -wait-tcp "127.0.0.1:$rport"
redis_version=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')

# start_ratelimit and start_sluice start one server and set addr to its
# gRPC address; stop_servers stops the servers started since the last call.
servers=()
start_ratelimit() {
	local grpc http debug
	grpc=$("$bench" -free-port); http=$("$bench" -free-port); debug=$("$bench" -free-port)
	USE_STATSD=false DISABLE_STATS=true LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rport" \
		HOST=127.0.0.1 PORT="$http" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc" \
		DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug" \
		"$out/bin/service_cmd" >>"$out/ratelimit.log" 2>&1 &
	servers+=($!)
	pids+=($!)
	"$bench" -wait-tcp "127.0.0.1:$grpc"
	addr="127.0.0.1:$grpc"
}
start_sluice() {
	local grpc
	grpc=$("$bench" -free-port)
	"$out/bin/sluice" serve -redis "127.0.0.1:$rport" -listen "127.0.0.1:$grpc" >>"$out/sluice.log" 2>&1 &
	servers+=($!)
	pids+=($!)
	"$bench" -wait-tcp "127.0.0.1:$grpc"
	addr="127.0.0.1:$grpc"
}
start_noop() {
	local grpc
	grpc=$("$bench" -free-port)
	"$bench" -serve-noop "127.0.0.1:$grpc" >>"$out/noop.log" 2>&1 &
	servers+=($!)
	pids+=($!)
	"$bench" -wait-tcp "127.0.0.1:$grpc"
	addr="127.0.0.1:$grpc"
}
stop_servers() {
	for p in "${servers[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	servers=()
}

results="$out/results.jsonl"
: >"$results"
run() { # label targets args...
	local label="$1" targets="$2"
	shift 2
	echo "run.sh: $label" >&2
	"$bench" -label "$label" -targets "$targets" -callers 8 -duration "$duration" "$@" | tee -a "$results" >&2
}

nonce=$(date +%s)
start_ratelimit; run "envoyproxy/ratelimit, 1 server" "$addr" -descriptor bench -keys 1000 -key-prefix "t$nonce-"; stop_servers
start_sluice; run "sluice serve, 1 server" "$addr" -descriptor bench -keys 1000 -key-prefix "t$nonce-"; stop_servers
start_noop; run "no decision (gRPC alone)" "$addr" -descriptor bench -keys 1000 -key-prefix "t$nonce-"; stop_servers
start_ratelimit; a=$addr; start_ratelimit
run "envoyproxy/ratelimit, 2 servers" "$a,$addr" -descriptor fleet -keys 10 -key-prefix "r$nonce-" -limit 1000 -window 1h
stop_servers
start_sluice; a=$addr; start_sluice
run "sluice serve, 2 servers" "$a,$addr" -descriptor fleet -keys 10 -key-prefix "s$nonce-" -limit 1000 -window 1h
stop_servers

# The page, from the results (one JSON object a line).
page() {
	local cpu
	cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
	cat <<EOF
# Performance: sluice serve and envoyproxy/ratelimit

## In one minute

Behind envoy, \`sluice serve\` answers envoy's rate limit API from local
decisions, while envoyproxy/ratelimit asks Redis on every request. The
tables compare both on one machine, one Redis and one configuration; the
row "no decision" is the ceiling gRPC itself sets here.

<!-- generated by benchmarks/rls/run.sh: begin -->

Generated $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -sm), ${cpu:-unknown CPU}, $(nproc) cores
(shared by the servers, the Redis and the client), $(go version | cut -d' ' -f3),
Redis $redis_version on loopback. envoyproxy/ratelimit $RATELIMIT_VERSION runs with
its defaults (no local cache, no pipelining; stats off, as \`sluice serve\`
has no metrics exporter without \`-http\`). \`sluice serve\` runs with its
defaults (error budget 1 %, sync every 100 ms). Both read one file in
envoyproxy/ratelimit's runtime layout:

\`\`\`yaml
$(cat "$out/runtime/ratelimit/config/bench.yaml")
\`\`\`

The client is \`benchmarks/rls\` (envoy's generated Go client): 8
concurrent callers, $duration per run, one descriptor per request. The row
"no decision" is a server of the same API that answers OK without deciding
anything: what gRPC and protobuf alone cost on this machine, the ceiling of
any rate limit service behind this API here.

## Decisions: one server, 1000 keys under their limit

| server | decisions/s | p50 | p99 | p99.9 | errors |
|---|---:|---:|---:|---:|---:|
EOF
	awk -F'\n' '/"keys":1000/' "$results" | while read -r line; do
		row "$line" decisions
	done
	cat <<EOF

## Over-admission: two servers sharing the Redis, 10 keys of 1000 per hour

Each key is asked until long past its limit, by callers on both servers;
over-admission is what a key got past its limit, as a fraction of it.

| fleet | decisions/s | admitted per key (mean) | most admitted | over-admission (worst key) | over-admission (mean) | errors |
|---|---:|---:|---:|---:|---:|---:|
EOF
	awk '/"keys":10,/' "$results" | while read -r line; do
		row "$line" fleet
	done
	printf '\n<!-- generated by benchmarks/rls/run.sh: end -->\n'
}
# row prints one result as a table row.
row() {
	local j="$1" kind="$2"
	get() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" <<<"$j"; }
	local label
	label=$(sed -n 's/.*"label":"\([^"]*\)".*/\1/p' <<<"$j")
	if [ "$kind" = decisions ]; then
		printf '| %s | %.0f | %.0f µs | %.0f µs | %.0f µs | %s |\n' "$label" "$(get per_second)" "$(get p50_us)" "$(get p99_us)" "$(get p999_us)" "$(get errors)"
	else
		local crossed=""
		[ "$(get crossed_window)" = true ] && crossed=" (crossed an hour)"
		printf '| %s | %.0f | %.1f | %s | %.2f %%%s | %.2f %% | %s |\n' "$label" "$(get per_second)" "$(get mean_admitted)" "$(get max_admitted)" "$(get max_over_pct)" "$crossed" "$(get mean_over_pct)" "$(get errors)"
	fi
}

if [ -n "$doc" ]; then
	page >"$doc"
	echo "run.sh: wrote $doc" >&2
else
	page
fi
