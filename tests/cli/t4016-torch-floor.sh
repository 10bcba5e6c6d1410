#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# ctest: lock timing -- an honest verdict from real timing (CMakeLists.txt)
# The physical floor of a torch task (PROTO: gates.physical_floor,
# gates.physical_floor.cache_allowance) and the output-overlap rule beside
# it (PROTO: gates output_aliasing), on CPU tensors:
# - the runner reports the reference's output bytes once (event outputs);
# - a stride-0 broadcast of 256 row sums for a dense 256 x 64 output
#   (tests/fixtures/torch/rowsum/broadcast) is refused at output_aliasing,
#   the honest dense copy is not;
# - a candidate that keeps its 96 MiB result and returns it on the timed
#   calls (tests/fixtures/torch/relu_floor/cache: right on every input set
#   and through result reuse) is refused at physical_floor by atb measure,
#   the reason naming the output bytes and the caches' allowance, while the
#   reference timed beside it (the honest copy's code) is far above the
#   floor.  On a box whose caches hold the whole output there is no floor:
#   then the cheat must still be refused (by the timed checks).
# Needs a python with PyTorch ($ATB_PYTHON, else .venv-torch).
. "$(dirname "$0")/lib.sh"

RUNNER=${ATB_RUNNER:-$ATB_BUILD_DIR/atb-runner}
FIX=$ATB_SOURCE_DIR/tests/fixtures/torch
command -v jq >/dev/null || skip_all "jq not installed"
[ -x "$RUNNER" ] || skip_all "no atb-runner at $RUNNER"
need_torch_cpu "$RUNNER"
export ATB_PYTHON=$PY ATB_TORCH_DEVICE=cpu
export ATB_DB=$TRASH/atb.db

python_json python.json

# run TASK CANDIDATE: the relu01 job shape on TASK with CANDIDATE, timed.
run() {
	jq -c --arg t "$FIX/$1.py" --arg c "$FIX/$1/$2/model_new.py" \
		--arg m "$ATB_SOURCE_DIR/python" --slurpfile p python.json \
		'.arms[0].py=$t | .arms[1].py=$c | .torch.python=$p[0] |
		 .torch.module_path=$m | .options.skip_timing=false' "$FIX/relu01-job.json" >"$2.job" &&
	{ "$RUNNER" <"$2.job" >"$2.ev" 2>"$2.err"; echo $? >"$2.rc"; }
}

test_expect "the runner reports the reference's dense output bytes once; the honest copy passes" '
	run rowsum honest && [ "$(cat honest.rc)" = 0 ] &&
	jq -se "(map(select(.event==\"outputs\")) | length==1 and .[0].outputs.bytes==65536 and
		 .[0].outputs.aliased_bytes==0 and .[0].outputs.overlapping_bytes==0) and
		(map(select(.event==\"done\"))[0].correctness_failures==0)" honest.ev >/dev/null ||
	{ jq -c "select(.event==\"outputs\" or .event==\"done\")" honest.ev; exit 1; }
'

test_expect "a broadcast output (stride 0) is an overlap the reference does not have: runner facts" '
	run rowsum broadcast &&
	jq -se "map(select(.event==\"correctness\" and .arm==\"candidate\")) |
		length>0 and all(.gates.output_aliasing.overlaps[0][1] | startswith(\"itself\"))" \
		broadcast.ev >/dev/null ||
	{ jq -c "select(.event==\"correctness\") | .gates.output_aliasing" broadcast.ev | head -3; exit 1; }
'

test_expect "atb measure refuses the broadcast at output_aliasing (exit 2)" '
	expect_exit 2 "$ATB" measure --json "$FIX/rowsum.py" "$FIX/rowsum/broadcast/model_new.py" &&
	jq -e ".verdict==\"rejected\" and .gate==\"output_aliasing\" and .result_id==null and
		(.reason|test(\"itself\"))" "$TRASH/out" >/dev/null ||
	{ cat "$TRASH/out"; exit 1; }
'

test_expect "a result kept across calls is refused at physical_floor; the reference is far above it" '
	expect_exit 2 "$ATB" measure --json "$FIX/relu_floor.py" "$FIX/relu_floor/cache/model_new.py" &&
	cp "$TRASH/out" cache.json &&
	if jq -e ".output_bytes > .floor_allowance_bytes" cache.json >/dev/null; then
		jq -e ".verdict==\"rejected\" and .gate==\"physical_floor\" and .result_id==null and
			.output_bytes==100663296 and .floor_allowance_bytes>0 and .floor_ns>0 and
			.candidate_median_ns < 0.9 * .floor_ns and .baseline_median_ns > 2 * .floor_ns and
			(.reason|test(\"the reference.s outputs are 100663296 bytes\"))" cache.json >/dev/null ||
		{ cat cache.json; exit 1; }
		sql "$ATB_DB" "SELECT detail FROM rejection WHERE rule = '"'"'gate:physical_floor'"'"'" |
			jq -e ".bytes > 0 and .floor_ns > 0" >/dev/null
	else
		echo "# this box caches the whole output ($(jq .floor_allowance_bytes cache.json) bytes): no floor"
		jq -e ".verdict==\"rejected\" and .floor_ns==0" cache.json >/dev/null ||
			{ cat cache.json; exit 1; }
	fi
'

test_done
