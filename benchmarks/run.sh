#!/usr/bin/env bash
# Runs every sluice benchmark side by side with the floor and the peers, and
# writes docs/performance.md (with the sync tables on a page of their own,
# docs/performance-sync.md, the per-key tables, ratios, algorithms and setup
# in benchmarks/performance-detail.md, and benchstat's output in
# benchmarks/benchstat.md, all linked from it) from that one run.
#
#   ./run.sh            full run (about 20 minutes on 2 idle cores)
#   ./run.sh -quick     fewer repetitions and shorter runs (a few minutes)
#   ./run.sh -profile   also write CPU profiles of the sluice benchmarks and
#                       `go tool pprof -top` of each into the output directory
#   ./run.sh -out DIR   keep raw results, benchstat output and profiles in DIR
#                       (default: benchmarks/out/<UTC date-time>)
#   ./run.sh -no-doc    do not touch docs/performance*.md (write them into DIR)
#
# Needs Go, redis-server and redis-benchmark in PATH. The benchmarks start
# their own throwaway redis-server on a free loopback port (never 6379) and
# kill it at the end.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

mode=full
out=""
profile=0
doc="$here/../docs/performance.md"
while [ $# -gt 0 ]; do
	case "$1" in
	-quick | --quick) mode=quick ;;
	-profile | --profile) profile=1 ;;
	-out | --out) out="$2"; shift ;;
	-no-doc | --no-doc) doc="" ;;
	-h | -help | --help) sed -n '2,18p' "$here/$(basename "$0")"; exit 0 ;;
	*) echo "run.sh: unknown argument $1 (try -help)" >&2; exit 2 ;;
	esac
	shift
done

for bin in go redis-server redis-benchmark; do
	command -v "$bin" >/dev/null || { echo "run.sh: $bin not found in PATH" >&2; exit 1; }
done

if [ "$mode" = quick ]; then
	check_count=3 check_time=0.2s
	algo_count=3 algo_time=0.1s
	remote_count=3 remote_time=0.2s
	sync_count=2 sync_time=0.5s
	mem_count=1
else
	check_count=8 check_time=0.4s
	algo_count=5 algo_time=0.2s
	remote_count=8 remote_time=0.3s
	sync_count=6 sync_time=1s
	mem_count=3
fi

[ -n "$out" ] || out="$here/out/$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
results="$out/results.txt"
: >"$results"
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The machine's state before the run: a busy machine skews every number.
load_before="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime)"
busy="$(ps -eo pcpu=,comm= --sort=-pcpu 2>/dev/null | awk '$1 >= 20 {printf "%s%s (%s%% CPU)", sep, $2, $1; sep=", "}' || true)"

log "building the benchmark binary"
go test -c -o "$out/benchmarks.test" .
test_bin="$out/benchmarks.test"

log "checking the key-set distributions"
"$test_bin" -test.run 'TestDistributions' -test.v >"$out/dist.txt" 2>&1 || { cat "$out/dist.txt" >&2; exit 1; }

# Sample the load average while the benchmarks run (they account for about
# 2 themselves: the benchmark and redis-server).
(while sleep 10; do cut -d' ' -f1 /proc/loadavg 2>/dev/null; done) >"$out/load.txt" &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true' EXIT

start=$(date +%s)
run() { # name, then test binary flags
	local name="$1"; shift
	log "$name"
	"$test_bin" -test.run '^$' -test.timeout 60m "$@" | tee -a "$results" | grep -E '^(Benchmark|--- FAIL|FAIL|panic)' | sed 's/^/    /' >&2 || true
	if grep -q -E '^(--- FAIL|FAIL|panic)' "$results"; then
		echo "run.sh: $name failed; see $results" >&2
		exit 1
	fi
}

run "per-key checks, in process (count $check_count, $check_time each)" \
	-test.bench '^(BenchmarkCheck|BenchmarkTimeNow|BenchmarkTelemetry)$' -test.count "$check_count" -test.benchtime "$check_time"
run "every algorithm's check beside the floor (count $algo_count, $algo_time each)" \
	-test.bench '^BenchmarkAlgorithms$' -test.count "$algo_count" -test.benchtime "$algo_time"
run "per-key checks through Redis (count $remote_count, $remote_time each)" \
	-test.bench '^BenchmarkCheckRemote$' -test.count "$remote_count" -test.benchtime "$remote_time"
run "sync cycles and redis-benchmark on the same Redis (count $sync_count)" \
	-test.bench '^(BenchmarkSync|BenchmarkSyncFloor|BenchmarkRedisINCR)$' -test.count "$sync_count" -test.benchtime "$sync_time"
run "memory per key (count $mem_count)" \
	-test.bench '^BenchmarkMemory$' -test.count "$mem_count" -test.benchtime 1x
elapsed=$(( $(date +%s) - start ))
load_after="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime)"
kill "$sampler" 2>/dev/null || true
load_during="$(awk '{s+=$1; if ($1>m) m=$1; n++} END {if (n) printf "mean %.2f, max %.2f (%d samples)", s/n, m, n}' "$out/load.txt")"

if [ "$profile" = 1 ]; then
	log "CPU profiles of the sluice benchmarks"
	# One profile per key set, path and mode of sluice. *.check.txt keeps the
	# samples of the timed loops only (pprof label phase=timed); *.all.txt
	# has everything, including setup and the background goroutines.
	prof() { # name, bench regexp
		local p="$out/cpu-$1"
		"$test_bin" -test.run '^$' -test.bench "$2" -test.benchtime 2s -test.cpuprofile "$p.prof" >"$p.txt" 2>&1 || true
		go tool pprof -top -nodecount 40 -tagfocus=phase=timed "$test_bin" "$p.prof" >"$p.check.txt" 2>/dev/null || true
		go tool pprof -top -nodecount 40 "$test_bin" "$p.prof" >"$p.all.txt" 2>/dev/null || true
	}
	for set in hot 10k 1M-zipf 1M-zipf1.0 churn; do
		for lib in sluice-eventual sluice-eventual-idle sluice-local; do
			prof "$set-allow-$lib" "^BenchmarkCheck\$/^set=$set\$/^path=allow\$/^lib=$lib\$"
		done
		[ "$set" = churn ] && continue # no deny path
		for lib in sluice-eventual-idle sluice-local; do
			prof "$set-deny-$lib" "^BenchmarkCheck\$/^set=$set\$/^path=deny\$/^lib=$lib\$"
		done
	done
	prof sync-10k '^BenchmarkSync$/^dirty=10k$'
	log "profiles: $out/cpu-*.check.txt (checks only), $out/cpu-*.all.txt (whole process)"
fi

log "benchstat"
# Run from inside the output directory, so that benchstat's column header
# is the file's name, not a path of this machine.
benchstat="$(go tool -n benchstat)"
(cd "$out" && "$benchstat" results.txt) >"$out/benchstat.txt" 2>&1 || true

# Metadata for the report.
commit="$(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git -C "$here/.." status --porcelain -- . ':!benchmarks' ':!docs' 2>/dev/null)" ]; then
	commit="$commit + uncommitted changes"
fi
cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
[ -n "$cpu" ] || cpu="$(uname -p)"
mods="$(go list -m -f '{{.Path}} {{.Version}}' github.com/puzpuzpuz/xsync/v3 github.com/redis/go-redis/v9 \
	github.com/sethvargo/go-limiter golang.org/x/time github.com/ulule/limiter/v3 github.com/go-redis/redis_rate/v10 \
	golang.org/x/perf | paste -sd ';' - | sed 's/;/; /g')"
note=""
if [ -n "$busy" ] || awk -v l="${load_before%% *}" 'BEGIN {exit !(l > 1.5)}' ||
	awk '{s+=$1; n++} END {exit !(n && s/n > 3)}' "$out/load.txt"; then
	note="the machine was not idle: load average before the run $load_before, during it $load_during (the benchmarks themselves account for about 2)${busy:+; busy at the start: $busy}. Expect wide confidence intervals."
fi
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "mode: $mode"
	echo "count: $check_count (in-process checks), $algo_count (algorithms), $remote_count (checks through Redis), $sync_count (sync), $mem_count (memory)"
	echo "count_algos: $algo_count"
	echo "benchtime: $check_time (in-process checks), $algo_time (algorithms), $remote_time (through Redis), $sync_time (sync)"
	echo "run time: $((elapsed / 60)) min $((elapsed % 60)) s (benchmarks only)"
	echo "remote_goroutines: 32"
	echo "CPU: $cpu"
	echo "cores: $(nproc) (GOMAXPROCS $(nproc))"
	echo "memory: $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}')"
	echo "OS: $(uname -sr)"
	echo "load average: before $load_before; during $load_during; after $load_after"
	echo "Go: $(go version | cut -d' ' -f3-)"
	echo "sluice: $commit"
	echo "Redis: $(redis-server --version | sed 's/^Redis server //')"
	echo "modules: $mods"
	echo "machine_note: $note"
} >"$out/meta.txt"

target="${doc:-$out/performance.md}"
bstarget="$here/benchstat.md"
detailtarget="$here/performance-detail.md"
[ -n "$doc" ] || { bstarget="$out/benchstat.md"; detailtarget="$out/performance-detail.md"; }
go run ./cmd/perfreport -results "$results" -meta "$out/meta.txt" -benchstat "$out/benchstat.txt" \
	-benchstat-o "$bstarget" -dist "$out/dist.txt" -o "$target" -sync-o "$(dirname "$target")/performance-sync.md" \
	-detail-o "$detailtarget"
log "wrote $target, $(dirname "$target")/performance-sync.md, $detailtarget and $bstarget (raw results in $out)"
