#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Where the noise of the REAL engine's paired A/B comes from (llama.cpp's
# llama-server, scripts/install-engine-deps.sh, on the tiny chain model of
# tools/engine/make-tiny-gguf.py).  For each configuration -- requests per
# seed (the task's workload.requests) x isolation -- it runs `atb engine ab`
# twice on the bundled task (repetitive by default), 8 seeds each:
#   null  the default configuration against itself (a null A/B: every
#         spread of its per-seed ratios is the box's, none the engine's);
#   spec  n-gram speculation (ngram-simple, n=3, m=16) against the default.
# Isolation (PINS): "none" (engine and atb share both CPUs with everyone
# else); "split" (the task's `cpus: [1]` pins every engine to CPU 1 with
# sched_setaffinity before exec; atb itself runs under `taskset -c 0`);
# "nice" (atb under `nice -n -15`, which its engines inherit: both ahead of
# the box's other work in the scheduler; needs root, else not measured);
# "split-nice" (both).
#
# Printed per A/B: the verdict, the cv of the per-seed requests/s ratios of
# every attempt (the first run and the noise re-runs, which atb makes while
# the cv is over the protocol's stats.cv_cap), the geometric mean of the first
# run's ratios and how many of them are above 1, the spread of the engine's
# speed WITHIN an arm (median over the first run's arms of the cv of the
# measured requests' end-to-end latencies, and their lag-1 autocorrelation:
# near 0, request-to-request jitter that more requests average out; near 1,
# stretches of fast and slow seconds that they do not; and the cv of the
# ratio of each arm's second half to its first half, one engine measured
# twice, to set beside the first-run cv of fresh engines' pairs), the A/B's
# wall time
# and the load
# average (`uptime`) before and after.  Then per configuration the ratio of
# the spec A/B's first-run cv to the null A/B's from the same run: about 1
# means the box's noise, not the candidate, sets the cv.
#
# No time here is a claim about the engine: the figures are this box's noise.
#
# Usage: bench/bench-engine-noise.sh [ATB] [REQUESTS...]
#   env PINS="none split" (isolation modes), ARMS="null spec",
#   TASK=engine-llamacpp-repeat|engine-llamacpp-random, SEEDS=8,
#   MODEL_ARGS="--dim 128 --layers 1 --ffn 256 --heads 2" (make-tiny-gguf.py's
#   shape options; the chain, and so the workloads, depend only on the seed
#   and the vocabulary; default: the tests' model)
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
ATB=$(realpath "${1:-${ATB:-build/release/atb}}")
shift || true
REQS=${*:-4 16 64}
PINS=${PINS:-none split}
ARMS=${ARMS:-null spec}
TASK=${TASK:-engine-llamacpp-repeat}
SEEDS=${SEEDS:-8}
MODEL_ARGS=${MODEL_ARGS:-}
. tools/engine/env.sh
if [ -n "$ENGINE_MISSING" ]; then
	echo "bench-engine-noise: not measured: $ENGINE_MISSING"
	exit 0
fi
[ -x "$ATB" ] || { echo "bench-engine-noise: no atb binary at $ATB" >&2; exit 2; }
can_split=$([ "$(nproc)" -ge 2 ] && echo y || true)
can_nice=$(nice -n -15 true 2>/dev/null && echo y || true)
modes=
for pin in $PINS; do
	case $pin in
	split*) [ -n "$can_split" ] || { echo "pin $pin: not measured: one CPU"; continue; } ;;
	esac
	case $pin in
	*nice) [ -n "$can_nice" ] || { echo "pin $pin: not measured: nice -15 refused"; continue; } ;;
	esac
	modes="$modes $pin"
done
PINS=$modes

tmp=$(mktemp -d "${TMPDIR:-/tmp}/atb-enoise.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export ATB_TINY_GGUF=$tmp/tiny.gguf
"$ENGINE_PY" tools/engine/make-tiny-gguf.py "$ATB_TINY_GGUF" --seed 1 $MODEL_ARGS >/dev/null

load1() { cut -d' ' -f1 /proc/loadavg; }

# task copy with REQUESTS measured requests per seed and, for "split", the
# engine pinned to CPU 1
make_task() { # REQUESTS PIN -> path
	local d=$tmp/task-$1-$2
	mkdir -p "$d"
	cp "$src/tasks/$TASK"/* "$d"/
	# the bundled task's own cpus line goes: the mode decides
	sed -i "s/^  requests: .*/  requests: $1/; s/^name: .*/name: $TASK-r$1-$2/; /^cpus:/d" \
		"$d/engine.yaml"
	case $2 in split*) printf 'cpus: [1]\n' >>"$d/engine.yaml" ;; esac
	echo "$d/engine.yaml"
}

# analyse ab.json DB WORKDIR: one line of figures
analyse() {
	python3 - "$@" <<'PY'
import json, math, os, sqlite3, statistics as st, sys
out, db, wd = sys.argv[1:4]
o = json.load(open(out))
con = sqlite3.connect(db)
if o.get("result_id"):
    # admitted: the cv that passed is the result row's
    (d, cv) = con.execute("select stats, cv from result where id = ?",
                          (o["result_id"],)).fetchone()
    d = json.loads(d)
else:
    (d,) = con.execute("select detail from rejection where job_uuid = ?",
                       (o["job_uuid"],)).fetchone()
    d = json.loads(d)
    cv = d["cv_ratio"]
cvs = [r["cv_ratio"] for r in d.get("reruns", [])] + [cv]
first = d["reruns"][0]["replaced"] if d.get("reruns") else d["per_seed"]
b = {p["seed"]: p["requests_per_s"] for p in first if p["arm"] == "baseline"}
r = [p["requests_per_s"] / b[p["seed"]] for p in first if p["arm"] == "candidate"]
gm = math.exp(sum(map(math.log, r)) / len(r))
within, lag1, halves = [], [], []
for arm in sorted(os.listdir(wd)):
    if "rerun" in arm:
        continue
    e2e = []
    for line in open(os.path.join(wd, arm, "records.jsonl")):
        x = json.loads(line)
        if not x.get("warmup") and x.get("failure") == "ok":
            e2e.append((x["end_ns"] - x["sent_ns"]) / 1e6)
    if len(e2e) > 1:
        m, v = st.mean(e2e), st.pvariance(e2e)
        within.append(math.sqrt(v) / m)
        h = len(e2e) // 2
        halves.append(st.mean(e2e[h:]) / st.mean(e2e[:h]))
        if len(e2e) > 2 and v > 0:
            lag1.append(sum((a - m) * (b - m) for a, b in zip(e2e, e2e[1:])) /
                        (v * len(e2e)))
# the same engine's two halves against the first run's pairs of fresh
# engines: alike, the box drifts; pairs far noisier, each start differs
print("%-8s %s %-20s gm1 %.3f above1 %d/%d within-arm cv %.3f lag1 %s halves cv %.3f" % (
    o["verdict"], "cv/attempt", " ".join("%.3f" % c for c in cvs), gm,
    sum(x > 1 for x in r), len(r), st.median(within),
    "%.2f" % st.median(lag1) if lag1 else "-",
    st.pstdev(halves) / st.mean(halves) if len(halves) > 1 else float("nan")))
print("CV1 %.6f" % cvs[0], file=sys.stderr)
PY
}

printf '# bench-engine-noise %s, task %s, %s seeds, %s CPUs, model %s (%s bytes), %s\n' \
	"$(date -u +%FT%TZ)" "$TASK" "$SEEDS" "$(nproc)" "${MODEL_ARGS:-default}" \
	"$(stat -c %s "$ATB_TINY_GGUF")" "$(uptime | sed 's/.*load/load/')"
for n in $REQS; do
	for pin in $PINS; do
		task=$(make_task "$n" "$pin")
		pre=()
		case $pin in split*) pre=(taskset -c 0) ;; esac
		case $pin in *nice) pre=(nice -n -15 "${pre[@]}") ;; esac
		declare -A cv1=()
		for arm in $ARMS; do
			cand=default
			[ "$arm" = spec ] && cand=spec_type=ngram-simple,spec_ngram_size_n=3,spec_ngram_size_m=16
			wd=$tmp/w-$n-$pin-$arm
			mkdir -p "$wd"
			l0=$(load1)
			t0=$(date +%s.%N)
			"${pre[@]}" "$ATB" --db "$tmp/atb.db" engine ab "$task" --candidate "$cand" \
				--seeds "$SEEDS" --work-dir "$wd" --json >"$tmp/ab.json" 2>"$tmp/ab.err" || true
			t1=$(date +%s.%N)
			if ! jq -e .verdict "$tmp/ab.json" >/dev/null 2>&1; then
				printf 'requests %4s pin %-10s %-4s: failed: %s\n' "$n" "$pin" "$arm" \
					"$(tail -c 300 "$tmp/ab.err" | tr '\n' ' ')"
				continue
			fi
			line=$(analyse "$tmp/ab.json" "$tmp/atb.db" "$wd" 2>"$tmp/cv1")
			cv1[$arm]=$(sed -n 's/^CV1 //p' "$tmp/cv1")
			printf 'requests %4s pin %-10s %-4s: %s; %.0f s; load %s -> %s\n' "$n" "$pin" \
				"$arm" "$line" "$(echo "$t1 - $t0" | bc)" "$l0" "$(load1)"
			rm -rf "$wd"
		done
		if [ -n "${cv1[null]:-}" ] && [ -n "${cv1[spec]:-}" ]; then
			printf 'requests %4s pin %-10s first-run cv spec/null: %.2f\n' "$n" "$pin" \
				"$(echo "${cv1[spec]} / ${cv1[null]}" | bc -l)"
		fi
		unset cv1
	done
done
