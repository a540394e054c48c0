#!/usr/bin/env bash
# Regenerates docs/benchmarks.md: runs every Go benchmark of the module and
# `compactd eval` on every data file for every built-in policy, and writes
# the results with the machine and the exact commands. Plain bash, the go
# command and POSIX tools; nothing to install.
#
#   scripts/benchmarks.sh                     # everything (several minutes)
#   POLICIES="sliding lastn" scripts/benchmarks.sh
#   BENCHTIME=20x BENCH_PKGS="./host" scripts/benchmarks.sh
#
# Environment:
#   BENCHTIME   go test -benchtime (default 1s)
#   BENCH_PKGS  packages to benchmark (default: every package with a Benchmark)
#   POLICIES    policies to evaluate (default: every plugin built from plugins/)
#   COMPACTD_DATA  the data directory (default: ../shared/data)
#   OUT         the file to write (default: docs/benchmarks.md)
#   LOAD_CLIENTS, LOAD_SETS, LOAD_TIME  the load run's clients (default 2),
#               data sets (default tau-bench,mini-swe) and measured time
#               per target (default 3s)
#   LOAD_ORDERS  the orders the load run sends each set in (default
#               conversation,shuffled; see loadbench -orders)
#   LOAD_ROUNDS  the load run's rounds (default 1; see loadbench -rounds:
#               each ratio becomes the median of each round's own)
#   SKIP_BENCH=1 / SKIP_EVAL=1 / SKIP_LOAD=1 / SKIP_SUITE=1  leave a part out
#               (its section says so); the test suite part runs make test
#               three times, once to warm the caches, then quiet and beside
#               busy loops (half an hour or more)
#   ONLY_EVAL=1  rerun only the eval part and replace its section in the
#               existing OUT, keeping the other sections (after a policy or
#               eval change; the section says when and at which commit)
#   ONLY_SUITE=1  the same for the test suite part
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-docs/benchmarks.md}
BENCHTIME=${BENCHTIME:-1s}
DATA=${COMPACTD_DATA:-../shared/data}
if [ -n "${ONLY_SUITE:-}" ]; then
	if [ -n "${SKIP_SUITE:-}" ] || [ ! -f "$OUT" ]; then
		printf 'benchmarks: ONLY_SUITE=1 replaces (or adds) the test suite section of an existing %s (and needs the suite part)\n' "$OUT" >&2
		exit 1
	fi
	SKIP_BENCH=1
	SKIP_LOAD=1
	SKIP_EVAL=1
fi
# The eval part needs the full data set; say where it was looked for before
# minutes of benchmarks, not after.
if [ -z "${SKIP_EVAL:-}" ] && ! ls "$DATA"/*.jsonl >/dev/null 2>&1; then
	case $DATA in /*) where=$DATA ;; *) where="$ROOT/$DATA" ;; esac
	printf 'benchmarks: no .jsonl files in %s: the eval part needs the full data set.\n' "$where" >&2
	printf 'Set COMPACTD_DATA to the directory holding them, or SKIP_EVAL=1 to run only the Go benchmarks\n' >&2
	printf '(which skip, saying so, the ones that need the full data).\n' >&2
	exit 1
fi
if [ -n "${ONLY_EVAL:-}" ]; then
	if [ -n "${SKIP_EVAL:-}" ] || ! grep -q '^## compactd eval$' "$OUT" 2>/dev/null; then
		printf 'benchmarks: ONLY_EVAL=1 replaces the eval section of an existing %s (and needs the eval part)\n' "$OUT" >&2
		exit 1
	fi
	SKIP_BENCH=1
	SKIP_LOAD=1
	SKIP_SUITE=1
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/compactd-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
CHARTS=docs/benchmarks
log() { printf '%s\n' "$*" >&2; }

# --- the machine -------------------------------------------------------------
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)
mem=$(grep -m1 MemTotal /proc/meminfo 2>/dev/null | tr -s ' ' | cut -d' ' -f2 || echo 0)
gover=$(go version)
kernel=$(uname -sr)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain 2>/dev/null | head -1)" ]; then commit="$commit + uncommitted changes"; fi
load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')
started=$(date -u '+%Y-%m-%d %H:%M UTC')

# elapsed_ms START_NS → milliseconds since START_NS
elapsed_ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
# seconds MS → "12.3 s"
seconds() { printf '%d.%d s' $(($1 / 1000)) $((($1 % 1000) / 100)); }

# --- build -------------------------------------------------------------------
log "building compactd and the plugins into $WORK"
go build -o "$WORK/compactd" ./cmd/compactd
go run ./internal/wasmbuild/buildplugins -out "$WORK/plugins" >/dev/null
if [ -z "${POLICIES:-}" ]; then
	POLICIES=$(cd "$WORK/plugins" && ls *.wasm | sed 's/\.wasm$//' | tr '\n' ' ')
fi
POLICIES=$(echo $POLICIES)

# --- Go benchmarks -----------------------------------------------------------
bench_md="$WORK/bench.md"
: >"$bench_md"
if [ -z "${SKIP_BENCH:-}" ]; then
	if [ -z "${BENCH_PKGS:-}" ]; then
		BENCH_PKGS=$(grep -rl --include='*_test.go' '^func Benchmark' . | grep -v '^./bin/' |
			xargs -n1 dirname | sort -u | tr '\n' ' ')
	fi
	for pkg in $BENCH_PKGS; do
		cmd="go test -run '^\$' -bench . -benchmem -benchtime $BENCHTIME -count 1 $pkg"
		log "$cmd"
		if ! go test -run '^$' -bench . -benchmem -benchtime "$BENCHTIME" -count 1 "$pkg" >"$WORK/bench.txt" 2>&1; then
			log "benchmarks of $pkg failed; their output is in the report"
		fi
		grep -E '^BenchmarkProxyOverhead/' "$WORK/bench.txt" >>"$WORK/proxy.txt" || true
		{
			printf '### `%s`\n\n```sh\n%s\n```\n\n```\n' "${pkg#./}" "$cmd"
			grep -E '^(Benchmark|PASS|FAIL|ok|---|panic)' "$WORK/bench.txt" || true
			printf '```\n\n'
			# Native vs Wasm: a benchmark with a "native" path element
			# (Compact/long/native, Compact/native/state) against its
			# siblings that differ from it in that element only.
			awk '
				function key(p, n, j,   k, s) {
					s = ""
					for (k = 1; k <= n; k++) s = s (k > 1 ? "/" : "") (k == j ? "*" : p[k])
					return s
				}
				$1 ~ /^Benchmark/ && $4 == "ns/op" {
					name = $1; sub(/-[0-9]+$/, "", name)
					names[++count] = name; ns[name] = $3
				}
				END {
					for (i = 1; i <= count; i++) {
						n = split(names[i], p, "/")
						for (j = 1; j <= n; j++) if (p[j] == "native") { native[key(p, n, j)] = names[i]; order[++keys] = key(p, n, j) }
					}
					if (keys == 0) exit
					print "| benchmark | variant | ns/op | × native |"
					print "|---|---|---:|---:|"
					for (k = 1; k <= keys; k++) {
						K = order[k]; base = ns[native[K]]
						printf "| %s | native | %d | 1.00 |\n", K, base
						for (i = 1; i <= count; i++) {
							n = split(names[i], p, "/")
							for (j = 1; j <= n; j++)
								if (p[j] != "native" && key(p, n, j) == K)
									printf "| %s | %s | %d | %.2f |\n", K, p[j], ns[names[i]], ns[names[i]] / base
						}
					}
					print ""
				}' "$WORK/bench.txt"
		} >>"$bench_md"
	done
else
	echo "_Skipped in this run (SKIP_BENCH=1)._" >>"$bench_md"
fi

# proxy_table turns BenchmarkProxyOverhead's metrics into the overhead
# table (docs/proxy.md; target: at most 1 ms added).
proxy_table() {
	cat <<'END'
## Proxy overhead

What the proxy adds to a request it does not compact, against calling the
same local upstream directly (`BenchmarkProxyOverhead` in
`internal/server`): the conversation is sent again as an agent re-sends its
history, through the daemon's TCP listener as an SDK calls it, direct and
proxied requests alternating in one loop. `json` times the whole exchange;
`stream-ttfb` the time to the first byte of a streamed answer. Target: at
most 1 ms added at p50.

| request | body | direct p50 | proxied p50 | added p50 |
|---|---:|---:|---:|---:|
END
	awk '{
		name = $1; sub(/^BenchmarkProxyOverhead\//, "", name); sub(/-[0-9]+$/, "", name)
		for (i = 2; i < NF; i++) v[$(i + 1)] = $i
		printf "| %s | %d B | %d µs | %d µs | **%d µs** |\n", name, v["body-bytes"], v["direct-p50-µs"], v["proxied-p50-µs"], v["added-p50-µs"]
	}' "$1"
	echo
}

# --- load over the socket ----------------------------------------------------
load_md="$WORK/load.md"
: >"$load_md"
load_cmd="go run ./internal/loadbench/loadbench -data $DATA -clients ${LOAD_CLIENTS:-2} -sets ${LOAD_SETS:-tau-bench,mini-swe} -orders ${LOAD_ORDERS:-conversation,shuffled} -min-time ${LOAD_TIME:-3s} -rounds ${LOAD_ROUNDS:-1}"
if [ -z "${SKIP_LOAD:-}" ]; then
	log "$load_cmd"
	go build -o "$WORK/loadbench" ./internal/loadbench/loadbench
	"$WORK/loadbench" -data "$DATA" -clients "${LOAD_CLIENTS:-2}" -sets "${LOAD_SETS:-tau-bench,mini-swe}" \
		-orders "${LOAD_ORDERS:-conversation,shuffled}" -min-time "${LOAD_TIME:-3s}" -rounds "${LOAD_ROUNDS:-1}" -bin "$WORK/compactd" -plugins "$WORK/plugins" -out "$load_md"
else
	echo "_Skipped in this run (SKIP_LOAD=1)._" >>"$load_md"
fi

# --- compactd eval -----------------------------------------------------------
eval_md="$WORK/eval.md"
: >"$eval_md"
if [ -z "${SKIP_EVAL:-}" ]; then
	# GNU time gives the peak resident memory; without it the column is "-".
	gnutime=""
	if /usr/bin/time -f '%M' true >/dev/null 2>&1; then gnutime=1; fi
	printf '| policy | wall time | compactions | per compaction | peak RSS |\n|---|---:|---:|---:|---:|\n' >>"$eval_md"
	for p in $POLICIES; do
		log "compactd eval --policy $p (every file)"
		start=$(date +%s%N)
		if [ -n "$gnutime" ]; then
			timed=(/usr/bin/time -f '%M' -o "$WORK/rss-$p")
		else
			timed=()
		fi
		rc=0
		"${timed[@]}" "$WORK/compactd" eval --plugins "$WORK/plugins" \
			--data "$DATA" --policy "$p" --out "$WORK/eval-$p" >"$WORK/eval-$p.txt" 2>"$WORK/eval-$p.err" || rc=$?
		ms=$(elapsed_ms "$start")
		# Exit 4: the policy sent invalid requests; the report says which.
		if [ "$rc" -ne 0 ] && [ "$rc" -ne 4 ]; then
			log "eval --policy $p failed:"
			cat "$WORK/eval-$p.err" >&2
			exit 1
		fi
		n=0
		for x in $({ grep -o '[0-9,]* requests' "$WORK/eval-$p.txt" || true; } | tr -d , | cut -d' ' -f1); do
			n=$((n + x))
		done
		rss="-"
		if [ -n "$gnutime" ]; then rss="$(($(tail -1 "$WORK/rss-$p") / 1024)) MB"; fi
		per="-"
		if [ "$n" -gt 0 ]; then per="$((ms * 1000 / n)) µs"; fi
		printf '| %s | %s | %s | %s | %s |\n' "$p" "$(seconds "$ms")" "$n" "$per" "$rss" >>"$eval_md"
	done
	all=$(echo "$POLICIES" | tr ' ' ',')
	log "compactd eval --policy $all (every file, for the comparison tables)"
	rc=0
	"$WORK/compactd" eval --plugins "$WORK/plugins" --data "$DATA" --policy "$all" --out "$WORK/eval-all" \
		>"$WORK/eval-all.txt" 2>"$WORK/eval-all.err" || rc=$?
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 4 ]; then
		cat "$WORK/eval-all.err" >&2
		exit 1
	fi
	mkdir -p "$CHARTS"
	rm -f "$CHARTS"/*.svg
	cp "$WORK"/eval-all/*.svg "$CHARTS"/
else
	echo "_Skipped in this run (SKIP_EVAL=1)._" >>"$eval_md"
fi
load_end=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')

# coverage prints, for each part of the benchmark suite issue 6 asks for,
# the benchmarks of this run that measure it, or that none does yet.
coverage() {
	local names native="" missing="" d name
	names=$({ grep -ohE '^Benchmark[^ 	]*' "$bench_md" || true; } | sed 's/-[0-9]*$//' | sort -u)
	for d in plugins/*/; do
		name=$(basename "$d")
		if [ ! -e "$d/main.go" ] && ! ls "$d"/*.c >/dev/null 2>&1; then continue; fi
		if grep -qs 'native' "$d"/*_test.go; then native="$native $name"; else missing="$missing $name"; fi
	done
	cat <<'END'
## Coverage of the suite

What issue 6 asks the benchmark suite to measure, and the benchmarks of
this run that measure it. The script runs every `Benchmark` of the module,
so a part fills in as soon as its benchmark exists.

| part | measured by |
|---|---|
END
	printf '| Wasm vs native per policy, short and long conversations | policies with a `native` variant:%s; without:%s |\n' \
		"${native:- none}" "${missing:- none}"
	coverage_row "ABI cost split (encode, copy in, guest decode, policy, guest encode, copy out, assemble)" 'Split|Phase' "$names" \
		"host/ measures the fixed call cost (BenchmarkPing) and the transfer in (BenchmarkTransferIn)"
	coverage_row "Daemon over the socket: throughput, p50/p99 at 1, 8 and 32 clients" '^BenchmarkServer' "$names"
	coverage_row "Hot reload: write → new version serving; failed requests during 100 reloads under load" 'Reload' "$names"
	coverage_row "Cold start with all built-in plugins; memory per loaded plugin and per instance" 'Load|Start|Memory|RSS' "$names"
	coverage_row "Token counting: cold and cached on a turn-by-turn replay" '^BenchmarkCount' "$names"
	printf '| compactd eval on every file, per policy | [above](#compactd-eval)%s |\n' "${SKIP_EVAL:+ (skipped in this run)}"
}

# coverage_row PART PATTERN NAMES [NOTE] prints one row of the coverage table.
coverage_row() {
	local found
	found=$({ echo "$3" | grep -E "$2" || true; } | sed 's/^/`/; s/$/`/' | paste -sd, - | sed 's/,/, /g')
	if [ -n "$found" ]; then
		printf '| %s | %s |\n' "$1" "$found"
	else
		printf '| %s | **not measured yet**%s |\n' "$1" "${4:+; $4}"
	fi
}

# --- the test suite ----------------------------------------------------------
# suite_run NAME CMD... runs a make target with -json, keeping its output
# in $WORK/suite-NAME.json and "milliseconds result" in $WORK/suite-NAME.wall.
suite_run() {
	local name=$1 start status=pass
	shift
	log "$* TESTFLAGS=-json"
	start=$(date +%s%N)
	"$@" TESTFLAGS=-json >"$WORK/suite-$name.json" 2>"$WORK/suite-$name.err" || status=fail
	echo "$(elapsed_ms "$start") $status" >"$WORK/suite-$name.wall"
}

# suite_packages NAME prints "package seconds result" for every package
# that has tests, from go test -json's package events.
suite_packages() {
	grep -h '"Action":"\(pass\|fail\)"' "$WORK/suite-$1.json" 2>/dev/null | grep -v '"Test":' |
		sed -E 's/.*"Action":"([a-z]+)","Package":"([^"]+)","Elapsed":([0-9.]+).*/\2 \3 \1/' |
		sed -E 's#^github\.com/compactd/compactd/#./#; s#^github\.com/compactd/compactd #. #'
}

# minutes MS → "6m12s"
minutes() { printf '%dm%02ds' $(($1 / 60000)) $((($1 / 1000) % 60)); }

suite_md="$WORK/suite.md"
: >"$suite_md"
SUITE_BEFORE=docs/benchmarks/test-suite-before.tsv
if [ -z "${SKIP_SUITE:-}" ]; then
	# A first run fills the caches (Go's build cache, the tests' plugin
	# builds and compiled modules under $TMPDIR); the measured runs find
	# them warm, as a developer's second run does.
	log "make test (warming the caches; not measured)"
	make -s test >/dev/null 2>&1 || true
	suite_load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')
	suite_run quiet make -s test
	suite_run busy scripts/test-busy.sh -s test
	suite_run short make -s test-short
	suite_run unit make -s test-unit
	suite_load_end=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')
	{
		printf '| run | command | wall | result |\n|---|---|---:|---|\n'
		for run in "quiet:make test" "busy:scripts/test-busy.sh (make test beside $((2 * cores)) busy loops)" \
			"short:make test-short" "unit:make test-unit"; do
			read -r ms status <"$WORK/suite-${run%%:*}.wall"
			printf '| %s | `%s` | %s | %s |\n' "${run%%:*}" "${run#*:}" "$(minutes "$ms")" "$status"
		done
		echo
		printf 'Load average (1, 5, 15 min) before the quiet run / after the unit run: %s / %s.\n\n' \
			"$suite_load_start" "$suite_load_end"
		echo "Seconds each package's tests ran (\`go test -json\`'s elapsed time; building"
		echo "the test binaries is not in it) in the quiet and the busy run,"
		if [ -f "$SUITE_BEFORE" ]; then
			echo "beside the same before issue 20 (\`$SUITE_BEFORE\`: $(sed -n 's/^# measured: //p' "$SUITE_BEFORE"))."
		else
			echo "of this commit."
		fi
		echo "Packages under 5 s in every column are left out."
		echo
		suite_packages quiet >"$WORK/suite-quiet.pkgs"
		suite_packages busy >"$WORK/suite-busy.pkgs"
		awk -v before="$SUITE_BEFORE" '
			FNR == 1 { file++ }
			file == 1 { quiet[$1] = $2; res[$1] = $3; pkgs[$1] = 1; next }
			file == 2 { busy[$1] = $2; if ($3 == "fail") res[$1] = "fail"; pkgs[$1] = 1; next }
			END {
				has = 0
				while ((getline line < before) > 0) {
					if (line ~ /^#/ || line == "") continue
					split(line, f, "\t"); bq[f[1]] = f[2]; bb[f[1]] = f[3]; pkgs[f[1]] = 1; has = 1
				}
				if (has) {
					print "| package | before, quiet | before, busy | quiet | busy |"
					print "|---|---:|---:|---:|---:|"
				} else {
					print "| package | quiet | busy |"
					print "|---|---:|---:|"
				}
				n = 0
				for (p in pkgs) names[++n] = p
				for (i = 2; i <= n; i++) for (j = i; j > 1 && names[j] < names[j-1]; j--) { t = names[j]; names[j] = names[j-1]; names[j-1] = t }
				for (i = 1; i <= n; i++) {
					p = names[i]
					if (bq[p] + 0 < 5 && bb[p] + 0 < 5 && quiet[p] + 0 < 5 && busy[p] + 0 < 5 && res[p] != "fail") continue
					q = (p in quiet) ? sprintf("%.0f", quiet[p]) : "-"
					b = (p in busy) ? sprintf("%.0f", busy[p]) : "-"
					label = (res[p] == "fail") ? p " (failed)" : p
					if (has) printf "| %s | %s | %s | %s | %s |\n", label, (p in bq) ? bq[p] : "-", (p in bb) ? bb[p] : "-", q, b
					else printf "| %s | %s | %s |\n", label, q, b
				}
			}' "$WORK/suite-quiet.pkgs" "$WORK/suite-busy.pkgs"
		echo
	} >>"$suite_md"
else
	echo "_Skipped in this run (SKIP_SUITE=1)._" >>"$suite_md"
fi
# eval_section prints the "compactd eval" section, up to the next one.
eval_section() {
	cat <<EOF
## compactd eval

EOF
	if [ -n "${ONLY_EVAL:-}" ]; then
		cat <<EOF
_This section was regenerated alone (\`ONLY_EVAL=1 scripts/benchmarks.sh\`)
on $started at commit $commit, load average $load_start / $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?');
the rest of the page is from the run its header describes._

EOF
	fi
	cat <<EOF
Every conversation of every file of \`../shared/data\` replayed turn by turn
through each policy (\`docs/eval.md\` explains the replay and every figure).
\`retention\` is what each request still holds of the files, symbols, ids,
numbers, errors and constraints of its own history — early, middle and
late, not the task, which every policy keeps — and the retention table
splits it by the third of the history a fact was last seen in and by kind
([Retention probes](eval.md#retention-probes)).
Run time of one \`compactd eval --policy P\` over every file, on
\`--jobs\` = GOMAXPROCS = $cores workers, including reading the data, counting
every message's tokens once, and writing the report:

<!-- example skip: reads the full data set (../shared/data, not in the checkout); make bench runs it -->
\`\`\`sh
go build -o compactd ./cmd/compactd
go run ./internal/wasmbuild/buildplugins -out plugins
compactd eval --plugins plugins --data ../shared/data --policy P --out eval-P
\`\`\`

EOF
	cat "$eval_md"
	if [ -z "${SKIP_EVAL:-}" ]; then
		cat <<EOF

All policies in one run (the tables of \`summary.md\`):

EOF
		# The command eval recorded, without this run's temporary directory,
		# marked for readme_test.go as an example it cannot run.
		sed -e 's/^#### /### /' -e "s#$WORK/##g" \
			-e '/^```sh$/i <!-- example skip: reads the full data set (../shared/data, not in the checkout); make bench runs it -->' \
			"$WORK/eval-all/summary.md"
		printf '\nCharts (tokens sent per request of the longest conversation of each file, and cost per policy):\n\n'
		for f in "$CHARTS"/tokens-*.svg; do
			name=$(basename "$f" .svg)
			name=${name#tokens-}
			printf -- '- %s: [tokens](benchmarks/tokens-%s.svg) · [cost](benchmarks/cost-%s.svg)\n' "$name" "$name" "$name"
		done
		printf '\n![tokens per request, mini-swe-agent](benchmarks/tokens-mini_swe_agent_deepseek_swebench.svg)\n\n'
		printf '![cost per policy, mini-swe-agent](benchmarks/cost-mini_swe_agent_deepseek_swebench.svg)\n'
	fi
}

# suite_section prints the "Test suite" section.
suite_section() {
	cat <<END
## Test suite

END
	if [ -n "${ONLY_SUITE:-}" ]; then
		cat <<END
_This section was regenerated alone (\`ONLY_SUITE=1 scripts/benchmarks.sh\`)
on $started at commit $commit; the rest of the page is from the run its
header describes._

END
	fi
	cat <<END
How long the tests take (issue 20: \`make test\` within 8 minutes on 2 cores,
no package over 5 minutes, passing beside busy loops too; \`make test-unit\`
within 90 seconds). Each run is the make target with \`TESTFLAGS=-json\`,
after a first \`make test\` that warms the caches (Go's build cache, and
the plugins and compiled modules the tests share under \`\$TMPDIR\`). The
busy run is \`scripts/test-busy.sh\`: \`make test\` beside 2 × nproc
busy loops.

END
	cat "$suite_md"
}

# --- the document ------------------------------------------------------------
if [ -n "${ONLY_SUITE:-}" ]; then
	# Replace the test suite section (its heading up to the next "## ",
	# or the end), or add it at the end, and keep everything else.
	suite_section >"$WORK/suite-section.md"
	awk -v section="$WORK/suite-section.md" '
		/^## Test suite$/ { while ((getline line < section) > 0) print line; skip = 1; done = 1; next }
		skip && /^## / { skip = 0 }
		!skip { print }
		END { if (!done) { print ""; while ((getline line < section) > 0) print line } }
	' "$OUT" >"$WORK/out.md"
	mv "$WORK/out.md" "$OUT"
	log "replaced the test suite section of $OUT"
	exit 0
fi
if [ -n "${ONLY_EVAL:-}" ]; then
	# Replace the eval section (its heading up to the next "## ") and keep
	# everything else.
	{ eval_section; echo; } >"$WORK/eval-section.md"
	awk -v section="$WORK/eval-section.md" '
		/^## compactd eval$/ { while ((getline line < section) > 0) print line; skip = 1; next }
		skip && /^## / { skip = 0 }
		!skip { print }
	' "$OUT" >"$WORK/out.md"
	mv "$WORK/out.md" "$OUT"
	log "replaced the eval section of $OUT; wrote $CHARTS/"
	exit 0
fi
{
	cat <<EOF
# Benchmarks

Generated by \`scripts/benchmarks.sh\` on $started. **Do not edit by hand**:
change the script or the benchmarks and run it again (\`make bench\` does).
Numbers move with the machine and its load; compare numbers from one run.

| | |
|---|---|
| CPU | ${cpu:-unknown} |
| cores | $cores |
| memory | $((mem / 1024 / 1024)) GiB |
| Go | $gover |
| kernel | $kernel |
| commit | $commit |
| load average (1, 5, 15 min) at start / end | $load_start / $load_end |
| \`-benchtime\` | $BENCHTIME |
| policies evaluated | $POLICIES |

The machine is shared with other work when the load average is above the
number of cores; latencies and wall times are then upper bounds.

Contents: [Load over the socket](#load-over-the-socket) · [compactd eval](#compactd-eval) ·
[Proxy overhead](#proxy-overhead) · [Go benchmarks](#go-benchmarks) · [Coverage of the suite](#coverage-of-the-suite) ·
[Test suite](#test-suite)

## Load over the socket

compactd's \`POST /v1/compact\` against two services that do no compaction,
on the same transport (HTTP over a Unix socket) and the same requests:
every turn prefix of the real traces, each client sending one
conversation's prefixes in order, as agents do, and then the same requests
shuffled ("shuffled" columns: every request of the set in a random order,
so many agents' turns interleave and a conversation's later turn may come
before its earlier ones, as a daemon serving many agents at once sees them)
(\`internal/loadbench\`). Each target runs as its own process; its CPU per
request is read from the kernel. One warm-up pass over the set first
(connections, caches), then measured passes for at least the measured time.

\`\`\`sh
$load_cmd
\`\`\`

EOF
	cat "$load_md"
	echo
	eval_section
	echo
	if [ -s "$WORK/proxy.txt" ]; then proxy_table "$WORK/proxy.txt"; fi
	cat <<EOF
## Go benchmarks

\`go test -bench\` on every package that has benchmarks. Tables after a
package's output compare each benchmark that has a \`native\` variant (the
same policy code called natively, JSON in and out as the guest does it)
with its Wasm variants: \`wasm-fast\` is compactd's fast path (direct
linear-memory transfer, binary request), \`wasm-extism\` the portable
Extism path (RATIONALE.md, "Two paths into a plugin").

EOF
	cat "$bench_md"
	coverage
	echo
	suite_section
} >"$OUT"
log "wrote $OUT and $CHARTS/"
