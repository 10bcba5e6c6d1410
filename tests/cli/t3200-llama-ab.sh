#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# ctest: run_serial -- its verdict is real timing of a real engine: under
# ctest -j2 beside another test (and a loaded box) speculation read 1.21x
# and 1.30x, and alone on a quiet box 1.19x (2026-12-01; see the note on
# the first pairs below: a noise refusal's pairs are reported, not judged).
# The REAL engine: llama.cpp's llama-server (scripts/install-engine-deps.sh),
# started on loopback by atb, on the tiny constructed model the test writes
# (tools/engine/make-tiny-gguf.py: greedy decoding follows one seeded cycle).
# Prompt-lookup (n-gram) speculation against the engine's default:
#  - on the repetitive workload (the cycle is in the prompt) it is admitted
#    with requests/s ratio > 1 and its CI above 1, the greedy probes equal
#    the default's token for token, and the engine's own counters show the
#    drafts were made and accepted (the treatment was delivered);
#  - on the random workload it gives no speedup (no admitted CI above 1)
#    and its drafts find nothing to accept.
# PROTO: engine.paired_order, engine.fresh_engine_per_arm,
# engine.output_equivalence, stats.min_paired_seeds.
. "$(dirname "$0")/lib.sh"
. "$ATB_SOURCE_DIR/tools/engine/test-lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
command -v curl >/dev/null || skip_all "curl not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"

REP=$LLAMA_TASKS/engine-llamacpp-repeat/engine.yaml
RND=$LLAMA_TASKS/engine-llamacpp-random/engine.yaml
SPEC=spec_type=ngram-simple,spec_ngram_size_n=3,spec_ngram_size_m=16
# the load generator on CPU 0, the engines on CPU 1 (the tasks' cpus)
ON_CPU0=()
[ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null && ON_CPU0=(taskset -c 0)

test_expect "llama-server answers greedily and deterministically on the tiny model" '
	port=$(python3 -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); print(s.getsockname()[1])")
	"$LLAMA_SERVER" --model "$ATB_TINY_GGUF" --host 127.0.0.1 --port "$port" --parallel 1 \
		>srv.log 2>&1 &
	pid=$!
	for i in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done  # 60 s: a loaded box
	p=$(jq -c "{prompt, max_tokens: 24, temperature: 0}" "${REP%/*}/probes.jsonl" | head -1)
	curl -sf "http://127.0.0.1:$port/v1/completions" -d "$p" | jq -r ".choices[0].text" >a
	curl -sf "http://127.0.0.1:$port/v1/completions" -d "$p" | jq -r ".choices[0].text" >b
	kill "$pid"; wait "$pid" || true
	test -s a && cmp a b &&
	# the continuation is the cycle the prompt already holds
	jq -r .prompt "${REP%/*}/probes.jsonl" | head -1 >prompt &&
	grep -qF "$(cat a)" prompt
'

# What the protocol promises for a real speedup: admitted with its CI above 1
# when the cv of the per-seed ratios is within stats.cv_cap; on a box whose
# other work swings the engine's speed more than that, a refusal as noise
# with every cv stored, never an admission.  The tasks pin every engine to
# CPU 1 (cpus: [1]) and atb runs on CPU 0 here; on this 2-core box under
# other engineers' work (load 5-7) that still left the engine's speed
# drifting 2x over seconds within an arm (cv of the requests' end-to-end
# latency 0.2, lag-1 autocorrelation 0.5-0.9) and the null A/B's cv of
# per-seed ratios at 0.09-0.27 for 4, 16 and 64 requests a seed
# (bench/bench-engine-noise.sh, docs/engines-real.md).  When refused, the
# stored raw pairs of the first run must be complete and time-adjacent (each
# seed's two arms measured back to back; a noise re-run measures both arms of
# every seed again in the same order, each entry saying its attempt and
# order), and their geometric mean is printed, not asserted: the
# llama-server built here gives speculation 1.15-1.30x on this tiny model
# in the first pairs (1.73-2.29x with the engine built before session 5),
# an effect the box's noise can flip in 8 pairs (se of the log geometric
# mean about cv/sqrt(8) = 0.03-0.1), so a refusal's pairs say nothing
# reliable about it; what the refusal does with noise is atb's logic,
# tested on a planted noisy engine (u-engine, the test double's noisy=true).
# On the random workload that geometric mean must stay below 1.5 (it reads
# 0.92x: the margin is far beyond the noise).  The delivered drafts and
# the random workload's non-speedup stay checked.
# first_pairs OUTCOME.json: "ABOVE GEOMEAN" of the first run's per-seed
# ratios in the stored rejection of that job.
first_pairs() {
	python3 - "$1" <<'PY'
import json, math, sqlite3, sys
uuid = json.load(open(sys.argv[1]))["job_uuid"]
(d,) = sqlite3.connect("atb.db").execute(
    "select detail from rejection where job_uuid = ?", (uuid,)).fetchone()
d = json.loads(d)
# the first re-run replaced the first run's pairs, whole
first = d["reruns"][0]["replaced"] if d["reruns"] else d["per_seed"]
assert all(p["attempt"] == 1 for p in first), first
b = {p["seed"]: p for p in first if p["arm"] == "baseline"}
c = [p for p in first if p["arm"] == "candidate"]
assert all(abs(p["order"] - b[p["seed"]]["order"]) == 1 for p in c), first
r = [p["requests_per_s"] / b[p["seed"]]["requests_per_s"] for p in c]
assert len(r) == 8, r
print(sum(x > 1 for x in r), math.exp(sum(map(math.log, r)) / len(r)))
PY
}

test_expect "n-gram speculation on the repetitive workload: admitted with CI above 1, or (noisy box) refused as noise with its raw pairs stored" '
	mkdir -p w-rep w-rnd &&
	"${ON_CPU0[@]}" "$ATB" --db atb.db engine ab "$REP" --candidate "$SPEC" --seeds 8 \
		--work-dir w-rep --json >rep.json 2>rep.err || true
	test -s rep.json &&
	if jq -e ".verdict == \"admitted\"" rep.json >/dev/null; then
		jq -e ".speedup > 1 and .ci_low > 1" rep.json
	elif jq -e ".gate == \"client_lag\"" rep.json >/dev/null; then
		# the load generator itself was starved (a loaded CPU 0): nothing
		# was judged of the engine, so nothing of it is asserted
		echo "# admission not reached on this box: $(jq -r .reason rep.json)" >"$TRASH/noisy"
	else
		jq -e ".verdict == \"rejected\" and .gate == \"noise\"" rep.json &&
		first_pairs rep.json >pairs &&
		read above gm <pairs &&
		echo "# admission not reached on this box: $(jq -r .reason rep.json); first-run pairs: $above of 8 above 1, geometric mean $gm" >"$TRASH/noisy"
	fi
'
[ -s "$TRASH/noisy" ] && cat "$TRASH/noisy"

test_expect "the drafts were made and accepted (treatment delivered), none in the default" '
	grep -h "draft acceptance" w-rep/seed-*-candidate/engine.stderr >acc &&
	test -s acc &&
	! grep -q "draft acceptance" w-rep/seed-1-baseline/engine.stderr
'

test_expect "n-gram speculation on the random workload: no speedup" '
	"${ON_CPU0[@]}" "$ATB" --db atb.db engine ab "$RND" --candidate "$SPEC" --seeds 8 --work-dir w-rnd \
		--json >rnd.json 2>rnd.err || true
	# admitted with its CI reaching 1 or below, or refused as noise with no
	# speedup in its raw pairs: never a speedup, never a failure of the engine
	test -s rnd.json &&
	if jq -e ".verdict == \"admitted\"" rnd.json >/dev/null; then
		jq -e ".ci_low <= 1" rnd.json
	elif jq -e ".gate == \"client_lag\"" rnd.json >/dev/null; then
		echo "# the random workload not judged: $(jq -r .reason rnd.json)"
	else
		jq -e ".gate == \"noise\"" rnd.json &&
		first_pairs rnd.json >pairs-rnd &&
		read above gm <pairs-rnd && python3 -c "assert $gm < 1.5, $gm"
	fi
'

test_expect "each outcome is stored (a result with paired seeds, or a rejection with its reason) and the audit chain verifies" '
	test "$(sqlite3 atb.db "select (select count(*) from result) + (select count(*) from rejection where rule in (\"gate:noise\", \"gate:client_lag\"))")" -ge 2 &&
	test "$(sqlite3 atb.db "select count(*) from result r join job j on j.id = r.job where r.n_seeds < 8")" = 0 &&
	# the tasks pin the engine to CPU 1 (cpus: [1]); each outcome says so
	sqlite3 atb.db "select stats from result union all select detail from rejection where rule in (\"gate:noise\", \"gate:client_lag\")" >cpus &&
	python3 -c "
import json
rows = [json.loads(l) for l in open(\"cpus\")]
assert rows and all(r[\"engine_cpus\"] == [1] for r in rows), [r.get(\"engine_cpus\") for r in rows]" &&
	"$ATB" --db atb.db audit verify >v 2>&1
'

# On a failure keep what explains it (outcomes, the store, the arms' logs and
# records), since the test's folder is removed when it exits.
if [ "$tests_failed" -gt 0 ]; then
	keep=$ATB_BUILD_DIR/t3200-llama-ab.failed
	rm -rf "$keep" && mkdir -p "$keep" &&
		cp -r "$TRASH"/*.json "$TRASH"/*.err "$TRASH"/atb.db* "$TRASH"/w-rep "$TRASH"/w-rnd \
			"$keep"/ 2>/dev/null
	echo "# kept for diagnosis in $keep"
fi
test_done
