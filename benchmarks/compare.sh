#!/usr/bin/env bash
# Compares the check path of two or more commits in one interleaved run:
# BenchmarkCheck of sluice eventual (Allow, the syncer running against the
# benchmark's own redis-server on a free loopback port) on the key sets hot,
# 10k and 1M-zipf, serial and parallel; the root package's BenchmarkAllow
# (1 and 10,000 keys) and BenchmarkAllowAll; httplimit's BenchmarkMiddleware.
# It builds each commit's test binaries from a detached worktree, then runs
# them round by round, the commits' order reversed every other round, and
# prints benchstat's comparison.
#
#   ./compare.sh REV REV...           5 rounds, 0.3s per benchmark
#   ./compare.sh -rounds N REV REV... N rounds
#   ./compare.sh -benchtime D ...     the -test.benchtime of each benchmark
#   ./compare.sh -out DIR REV REV...  keep binaries, sources and raw results
#                                     in DIR (default: benchmarks/out/compare-<UTC date-time>)
#
# Needs Go, git and redis-server in PATH.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
rounds=5
benchtime=0.3s
out=""
while [ $# -gt 0 ]; do
	case "$1" in
	-rounds | --rounds) rounds="$2"; shift ;;
	-benchtime | --benchtime) benchtime="$2"; shift ;;
	-out | --out) out="$2"; shift ;;
	-h | -help | --help) sed -n '2,18p' "$here/$(basename "$0")"; exit 0 ;;
	-*) echo "compare.sh: unknown flag $1 (try -help)" >&2; exit 2 ;;
	*) break ;;
	esac
	shift
done
[ $# -ge 2 ] || { echo "compare.sh: name at least two commits" >&2; exit 2; }
[ "$rounds" -ge 1 ] 2>/dev/null || { echo "compare.sh: -rounds wants a positive number" >&2; exit 2; }
for bin in go git redis-server; do
	command -v "$bin" >/dev/null || { echo "compare.sh: $bin not found in PATH" >&2; exit 1; }
done

[ -n "$out" ] || out="$here/out/compare-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

revs=()
for rev in "$@"; do
	short="$(git -C "$here" rev-parse --short "$rev^{commit}")"
	revs+=("$short")
	src="$out/src-$short"
	if [ ! -d "$src" ]; then
		git -C "$here" worktree add -q --detach "$src" "$short"
	fi
	log "building $short"
	(cd "$src/benchmarks" && go test -c -o "$out/$short.bench.test" .)
	(cd "$src" && go test -c -o "$out/$short.root.test" .)
	(cd "$src/httplimit" && go test -c -o "$out/$short.http.test" .)
done
cleanup() {
	for short in "${revs[@]}"; do
		git -C "$here" worktree remove --force "$out/src-$short" 2>/dev/null || true
	done
}
trap cleanup EXIT

check='^BenchmarkCheck$/^set=(hot|10k|1M-zipf)$/^path=allow$/^lib=sluice-eventual$'
root='^BenchmarkAllow$/^sluice/|^BenchmarkAllowAll$'
for r in $(seq 1 "$rounds"); do
	order=("${revs[@]}")
	if [ $((r % 2)) -eq 0 ]; then
		order=($(printf '%s\n' "${revs[@]}" | tac))
	fi
	for short in "${order[@]}"; do
		log "round $r of $rounds: $short (load $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo ?))"
		src="$out/src-$short"
		(cd "$src/benchmarks" && "$out/$short.bench.test" -test.run '^$' -test.bench "$check" -test.benchtime "$benchtime" -test.benchmem) >>"$out/$short.txt"
		(cd "$src" && "$out/$short.root.test" -test.run '^$' -test.bench "$root" -test.benchtime "$benchtime" -test.benchmem) >>"$out/$short.txt"
		(cd "$src/httplimit" && "$out/$short.http.test" -test.run '^$' -test.bench '^BenchmarkMiddleware$' -test.benchtime "$benchtime" -test.benchmem) >>"$out/$short.txt"
	done
done

# benchstat from the benchmark module's tool directive, run inside the output
# directory so that its column headers are the commits, not paths.
benchstat="$(cd "$here" && go tool -n benchstat)"
files=()
for short in "${revs[@]}"; do files+=("$short.txt"); done
(cd "$out" && "$benchstat" "${files[@]}") | tee "$out/benchstat.txt"
log "raw results and benchstat.txt in $out"
