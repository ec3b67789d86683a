#!/usr/bin/env bash
# Measures the key map of localcache: the hand-written open-addressed map
# (localcache/keymap.go) against xsync.MapOf (localcache/keymap_xsync.go,
# built with the tag sluice_xsyncmap), side by side in one run. It builds
# the benchmark binary twice, with and without the tag, and runs
# BenchmarkCheck of sluice eventual (the syncer running against the
# benchmark's own redis-server, started on a free loopback port) on the key
# sets hot, 10k and 1M-zipf, allow path, serial and parallel, alternating
# the two binaries round by round. It prints a Markdown table: medians and
# ranges of ns/op and of the loop goroutines' CPU time per check, the ratio
# xsync ÷ key map, and allocations.
#
#   ./keymap.sh              5 rounds of each binary, 0.4s per benchmark
#   ./keymap.sh -rounds N    N rounds of each binary
#   ./keymap.sh -benchtime D the -test.benchtime of each benchmark
#   ./keymap.sh -out DIR     keep binaries and raw results in DIR
#                            (default: benchmarks/out/keymap-<UTC date-time>)
#   ./keymap.sh -doc         also replace the block this script generated in
#                            ../docs/performance.md ("The key map")
#   ./keymap.sh -report DIR  only print (and with -doc, write) the table of
#                            the run whose results DIR (an -out) holds
#
# Needs Go and redis-server in PATH.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

rounds=5
benchtime=0.4s
out=""
doc=""
report=""
while [ $# -gt 0 ]; do
	case "$1" in
	-rounds | --rounds) rounds="$2"; shift ;;
	-benchtime | --benchtime) benchtime="$2"; shift ;;
	-out | --out) out="$2"; shift ;;
	-doc | --doc) doc="$here/../docs/performance.md" ;;
	-report | --report) report="$2"; shift ;;
	-h | -help | --help) sed -n '2,23p' "$here/$(basename "$0")"; exit 0 ;;
	*) echo "keymap.sh: unknown argument $1 (try -help)" >&2; exit 2 ;;
	esac
	shift
done
[ "$rounds" -ge 1 ] 2>/dev/null || { echo "keymap.sh: -rounds wants a positive number" >&2; exit 2; }

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The threshold of the rule: the hand-written map stays where xsync takes at
# least this many times its time per check.
keep=1.25
bench='^BenchmarkCheck$/^set=(hot|10k|1M-zipf)$/^path=allow$/^lib=sluice-eventual$'

if [ -n "$report" ]; then
	out="$(cd "$report" && pwd)"
	[ -s "$out/meta.env" ] || { echo "keymap.sh: $report holds no finished run (no meta.env)" >&2; exit 1; }
else
	for bin in go redis-server; do
		command -v "$bin" >/dev/null || { echo "keymap.sh: $bin not found in PATH" >&2; exit 1; }
	done

	[ -n "$out" ] || out="$here/out/keymap-$(date -u +%Y%m%d-%H%M%S)"
	mkdir -p "$out"
	out="$(cd "$out" && pwd)"

	# The sources the binaries are built from (docs aside).
	commit="$(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo unknown)"
	if [ -n "$(git -C "$here/.." status --porcelain -- . ':!docs' 2>/dev/null)" ]; then
		commit="$commit + uncommitted changes"
	fi
	log "building the benchmark binary with the hand-written key map"
	go test -c -o "$out/keymap.test" .
	log "building the benchmark binary with xsync.MapOf (-tags sluice_xsyncmap)"
	go test -c -tags sluice_xsyncmap -o "$out/xsync.test" .

	load_before="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime)"
	(while sleep 10; do cut -d' ' -f1 /proc/loadavg 2>/dev/null; done) >"$out/load.txt" &
	sampler=$!
	trap 'kill "$sampler" 2>/dev/null || true' EXIT

	: >"$out/keymap.txt"
	: >"$out/xsync.txt"
	start=$(date +%s)
	one() { # map name
		log "round $r/$rounds: $1"
		"$out/$1.test" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" -test.count 1 \
			-test.benchmem -test.timeout 30m >"$out/$1.round.txt" 2>&1 || {
			cat "$out/$1.round.txt" >&2
			echo "keymap.sh: the $1 binary failed in round $r" >&2
			exit 1
		}
		grep '^Benchmark' "$out/$1.round.txt" | tee -a "$out/$1.txt" | awk '{print "    " $1, $3, $4}' >&2
	}
	for r in $(seq 1 "$rounds"); do
		# Alternate which map goes first, so that a drift in the machine's load
		# weighs on both alike.
		if [ $((r % 2)) = 1 ]; then one keymap; one xsync; else one xsync; one keymap; fi
	done
	elapsed=$(($(date +%s) - start))
	kill "$sampler" 2>/dev/null || true
	load_after="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime)"
	load_during="$(awk '{s+=$1; if ($1>m) m=$1; n++} END {if (n) printf "mean %.2f, max %.2f (%d samples)", s/n, m, n}' "$out/load.txt")"

	cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//;s/ *$//' || true)"
	[ -n "$cpu" ] || cpu="$(uname -p)"
	# What the report says of the run and the machine, so that -report can
	# render it again.
	{
		printf 'date=%q\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
		printf 'rounds=%q\nbenchtime=%q\nelapsed=%q\ncommit=%q\n' "$rounds" "$benchtime" "$elapsed" "$commit"
		printf 'machine=%q\n' "$(uname -m), $(nproc) cores, $cpu; $(uname -sr); $(go version | cut -d' ' -f3)"
		printf 'load_before=%q\nload_during=%q\nload_after=%q\n' "$load_before" "$load_during" "$load_after"
	} >"$out/meta.env"
fi
# shellcheck source=/dev/null
. "$out/meta.env"

# One line per benchmark and map: set, mode, map, ns/op, loop CPU ns/op,
# B/op, allocs/op.
extract() { # file, map name
	awk -v m="$2" '
		/^BenchmarkCheck\// {
			split($1, p, "/"); set = p[2]; mode = p[5]
			sub(/^set=/, "", set); sub(/^mode=/, "", mode); sub(/-[0-9]+$/, "", mode)
			ns = cpu = bytes = allocs = ""
			for (i = 3; i < NF; i++) {
				if ($(i+1) == "ns/op") ns = $i
				if ($(i+1) == "loop-cpu-ns/op") cpu = $i
				if ($(i+1) == "B/op") bytes = $i
				if ($(i+1) == "allocs/op") allocs = $i
			}
			print set, mode, m, ns, cpu, bytes, allocs
		}' "$1"
}
{ extract "$out/keymap.txt" keymap; extract "$out/xsync.txt" xsync; } >"$out/samples.txt"

table="$(awk -v keep="$keep" -v rounds="$rounds" '
	function sig(x) { # three significant digits, as the other tables
		if (x >= 100) return sprintf("%.0f", x)
		if (x >= 10) return sprintf("%.1f", x)
		return sprintf("%.2f", x)
	}
	function median(key,    n, i, j, t, a) {
		n = split(vals[key], a, " ")
		for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j+1] = a[j]; a[j+1] = t }
		lo[key] = a[1]; hi[key] = a[n]; cnt[key] = n
		return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
	}
	function ratio(x, y) { return y > 0 ? sprintf("%.2f×", x / y) : "—" }
	function cell(key,    m) {
		m = median(key)
		return sig(m) " (" sig(lo[key]) "–" sig(hi[key]) ")"
	}
	{
		k = $1 SUBSEP $2 SUBSEP $3
		vals[k "ns"] = vals[k "ns"] " " $4
		vals[k "cpu"] = vals[k "cpu"] " " $5
		vals[k "B"] = vals[k "B"] " " $6
		vals[k "al"] = vals[k "al"] " " $7
	}
	END {
		split("hot 10k 1M-zipf", sets, " "); split("serial parallel", modes, " ")
		title["hot"] = "1 hot key"; title["10k"] = "10k keys, uniform"; title["1M-zipf"] = "1M keys, Zipf 1.1"
		print "| key set | mode | key map ns/op | xsync ns/op | xsync ÷ key map | CPU ns/op: key map, xsync | ratio (CPU) | allocs/op: key map, xsync | key map wins by ≥ " keep "× |"
		print "|---|---|--:|--:|--:|--:|--:|--:|---|"
		wins = 0; loses = 0; rows = 0
		for (s = 1; s <= 3; s++) for (md = 1; md <= 2; md++) {
			a = sets[s] SUBSEP modes[md] SUBSEP "keymap"; b = sets[s] SUBSEP modes[md] SUBSEP "xsync"
			if (!((a "ns") in vals) || !((b "ns") in vals)) continue
			rows++
			ka = cell(a "ns"); xa = cell(b "ns"); kn = median(a "ns"); xn = median(b "ns")
			kc = median(a "cpu"); xc = median(b "cpu")
			al = median(a "al") ", " median(b "al")
			v = xn >= keep * kn ? "**yes**" : "no"
			if (xn >= keep * kn) wins++
			if (kn >= keep * xn) loses++
			printf "| %s | %s | %s | %s | %s | %s, %s | %s | %s | %s |\n", title[sets[s]], modes[md], ka, xa, ratio(xn, kn), sig(kc), sig(xc), ratio(xc, kc), al, v
		}
		printf "\nThe hand-written map wins by ≥ %s× (ns/op, medians) on %d of %d rows; xsync.MapOf wins by as much on %d.\n", keep, wins, rows, loses
	}' "$out/samples.txt")"

block="$(
	echo "<!-- generated by benchmarks/keymap.sh: begin -->"
	echo
	echo "Generated by \`benchmarks/keymap.sh\` on $date: BenchmarkCheck, sluice eventual, allow path, syncer running; rounds: $rounds of each map, alternating, ${benchtime} each. Median (min–max) over the rounds; ratios of medians. *CPU*: the loop's own CPU time per check (\`loop-cpu-ns/op\`), without the waits for a core."
	echo
	echo "$table"
	echo
	echo "Machine: $machine; sluice $commit. Load average: before $load_before; during $load_during; after $load_after. Run time $((elapsed / 60)) min $((elapsed % 60)) s."
	echo
	echo "<!-- generated by benchmarks/keymap.sh: end -->"
)"
printf '%s\n' "$block" >"$out/keymap.md"
printf '%s\n' "$block"

if [ -n "$doc" ]; then
	begin='<!-- generated by benchmarks/keymap.sh: begin -->'
	end='<!-- generated by benchmarks/keymap.sh: end -->'
	grep -qxF "$begin" "$doc" && grep -qxF "$end" "$doc" || {
		echo "keymap.sh: $doc has no block of this script to replace (the table is in $out/keymap.md)" >&2
		exit 1
	}
	awk -v begin="$begin" -v end="$end" -v f="$out/keymap.md" '
		$0 == begin { while ((getline l < f) > 0) print l; skip = 1; next }
		$0 == end { skip = 0; next }
		!skip' "$doc" >"$out/performance.md"
	cp "$out/performance.md" "$doc"
	log "wrote the table into $doc"
fi
log "raw results in $out"
